"""Bad input never gives a traceback: generated malformed experiment files, -p values,
trace files, DLIO checkpoint configs and command-line flags each give exactly one line on
stderr, exit status 2, and nothing in the kernel (no namespace, no run registry), within
docs/robustness.md's CPU budget (cpu_budget.py).

Cases are generated from the dimension table (every knob, in [fixed], [sweep] and its own
table), every table's unknown keys, wrong table types, non-UTF-8 bytes, broken TOML and
-p text (wrong types, out of range, NaN/inf, huge, empty, Unicode and full-width digits);
trace files from the example trace with each header field and event field made wrong;
checkpoint configs from llama3_8b.yaml with each model and checkpoint field made wrong.
"""

import copy
import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import cpu_budget
from testbed import cli
from testbed.experiment.plan import dimensions as dims
from testbed.paths import REPO

BAD_BY_KIND = {
    "int": ["4", 4.5, True, -1, 10**30, math.nan, math.inf, [], {"a": 1}, "４", ""],
    "float": ["1", True, math.nan, math.inf, -math.inf, -1.0, 1e308, [], "", "１"],
    "bool": ["yes", 1, 0.5, [], "true"],
    "rate": ["fast", -1, 0, 1e9, True, "１gbit", math.nan, "10 gbps", []],
    "choice": [5, "nope", True, "", [], "ｒａｗ"],
    "str_list": [5, [], [1], ["9"], [["3"]]],
    "auto": ["fast", -1, 0, 1e9, True, math.nan, "AUTO", "２", []],
    "limit": ["fast", -1, 0, 1e9, True, "１gbit", math.nan, -math.inf, "None", "10 gbps", []],
}
BAD_TEXT = ["abc", "", "nan", "inf", "-inf", "1e999", "４", "١٢", "-1", "99999999999999999999",
            "1.5.2", "0x10", "1_000", " ", "true", "[1]"]
# The texts of BAD_TEXT a knob of this kind takes (the test's own table, not the parser's
# word): each must then run (exit 0); every other pair must be refused.
GOOD_TEXT = {"bool": {"true"}}
TABLES = ("fixed", "sweep", "search", "mounts.fast", "hosts.fast", "dataset", "workload",
          "server", "cache", "staging", "capture")
PROFILES = {"mounts": "mount", "hosts": "host"}  # profile tables and the knob naming one


def toml_value(v):
    """A Python value as TOML (enough for the fuzz cases)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == math.inf else "-inf" if v == -math.inf
                                     else repr(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def out_of_range(d):
    """Values just outside a numeric knob's range."""
    out = []
    if d.kind in ("int", "float", "auto"):
        if d.lo is not None:
            out.append(int(d.lo) - 1 if d.kind == "int" else float(d.lo) - 1)
        if d.hi is not None:
            out.append(int(d.hi) + 1 if d.kind == "int" else float(d.hi) * 2 + 1)
    if d.kind in ("rate", "limit"):
        out.append(d.hi * 2)
    return out


def file_cases():
    """(name, bytes) of malformed experiment files."""
    cases = []
    for d in dims.DIMENSIONS:
        for v in BAD_BY_KIND[d.kind] + out_of_range(d):
            cases.append((f"fixed-{d.name}-{v!r}", f"[fixed]\n{d.name} = {toml_value(v)}\n"))
            if not isinstance(v, list):
                cases.append((f"sweep-{d.name}-{v!r}",
                              f"[sweep]\n{d.name} = [{toml_value(v)}]\n"))
            if d.section and d.section not in PROFILES:
                cases.append((f"{d.section}-{d.name}-{v!r}",
                              f"[{d.section}]\n{d.section_key} = {toml_value(v)}\n"))
            if d.section in PROFILES:
                cases.append((f"profile-{d.name}-{v!r}", f"[fixed]\n{PROFILES[d.section]} = "
                              f"\"x\"\n[{d.section}.x]\n{d.name} = {toml_value(v)}\n"))
    for table in TABLES:
        cases.append((f"unknown-in-{table}", f"[{table}]\nbogus_key = 1\n"))
    for key in ("bogus", "topologyy", "repetition", "nme"):
        cases.append((f"unknown-top-{key}", f"{key} = 1\n"))
    for table in ("fixed", "sweep", "search", "mounts", "hosts", "dataset", "workload",
                  "capture"):
        cases.append((f"table-type-{table}", f"{table} = 5\n"))
    cases += [
        ("empty-sweep", "[sweep]\ndistance_km = []\n"),
        ("fixed-list", "[fixed]\nnconnect = [1, 2]\n"),
        ("mounts-not-table", "[mounts]\nx = 5\n"),
        ("huge-product", "[sweep]\n" + "\n".join(
            f"{k} = [{', '.join(str(i) for i in range(1, 40))}]"
            for k in ("batch", "readers", "prefetch")) + "\n"),
        ("search-no-range", "[search]\nknob = 'distance_km'\ntarget = 'au_pct >= 90'\n"
                            "tolerance = 1\n"),
        ("search-bad-knob", "[search]\nknob = 'mount'\nrange = [0, 1]\n"
                            "target = 'au_pct >= 90'\ntolerance = 1\n"),
        ("search-reversed", "[search]\nknob = 'distance_km'\nrange = [3000, 0]\n"
                            "target = 'au_pct >= 90'\ntolerance = 1\n"),
        ("search-nan-target", "[search]\nknob = 'distance_km'\nrange = [0, 10]\n"
                              "target = 'au_pct >= nan'\ntolerance = 1\n"),
        ("search-zero-tolerance", "[search]\nknob = 'distance_km'\nrange = [0, 10]\n"
                                  "target = 'au_pct >= 90'\ntolerance = 0\n"),
        ("topology-unknown", 'topology = "mesh"\n'),
        ("topology-number", "topology = 5\n"),
        ("name-slash", 'name = "../x"\n'),
        ("preset-scale-big", "[workload]\npreset = 'unet3d-h100'\nscale = 2\n"),
        ("fibre-bad-link", '[sweep]\n"fibre.nowhere.distance_km" = [1]\n'),
        ("fibre-bad-knob", '[sweep]\n"fibre.wan.colour" = [1]\n'),
        ("fibre-dotted-bad", "[sweep]\nfibre.wan = 3\n"),
        ("broken-toml", "[sweep\ndistance_km = [0\n"),
        ("broken-string", 'name = "abc\n'),
    ]
    encoded = [(n, t.encode()) for n, t in cases]
    encoded += [("latin1", 'name = "caf\xe9"\n'.encode("latin-1")),
                ("nul-bytes", b"name = \"a\x00b\"\n"),
                ("utf16", 'name = "x"\n'.encode("utf-16")),
                ("random-bytes", bytes(random.Random(5).randrange(256) for _ in range(200))),
                ("bom-then-junk", b"\xef\xbb\xbf[fixed\n")]
    return encoded


def param_cases():
    """(name, -p KEY=VALUE) cases: every knob with every BAD_TEXT but its kind's
    GOOD_TEXT, and malformed pairs. None is dropped on the parser's word: a value it takes
    that the run must refuse (`mount=nan` where no [mounts.nan] is defined) stays a case."""
    cases = [(f"p-{d.name}-{text!r}", f"{d.name}={text}") for d in dims.DIMENSIONS
             for text in BAD_TEXT if text not in GOOD_TEXT.get(d.kind, ())]
    cases += [("p-no-equals", "nconnect"), ("p-empty-key", "=4"), ("p-unknown", "colour=1"),
              ("p-unknown-fibre", "fibre.x.distance_km=1"), ("p-reps", "repetitions=0"),
              ("p-au-bar", "au_bar=nan")]
    return cases


def flag_cases():
    """Bad command lines."""
    return [["run"], ["run", "experiments/demo.toml", "--bogus"],
            ["probe", "apn", "--count", "x"], ["probe", "apn", "--count", "-5"],
            ["probe", "apn", "--interval-ms", "nan"], ["probe", "apn", "--count", "４"],
            ["probe"], ["probe", "apn", "--run", "tb0000"],
            ["analyse", "nope.pcap"], ["analyse", "x.pcap", "--rtt-ms", "inf"],
            ["topo", "show", "apn", "-p", "workers=x"], ["topo", "show", "apn", "-p", "w"],
            ["topo", "show", "apn", "-p", "workers=４"], ["topo", "show", "mesh"],
            ["topo"], ["up"], ["demo", "-p", "nconnect=99"], ["nosuchcommand"]]


TRACE_LINES = (REPO / "traces" / "example-loader.trace").read_text().splitlines()[:40]
TRACE_HEAD = json.loads(TRACE_LINES[0])
TRACE_EVENT = json.loads(TRACE_LINES[2])  # a read: [t_us, stream, "read", file, fd, ...]
TRACE_COLUMNS = TRACE_HEAD["columns"]
BAD_HEADER = {
    "format": [None, 5, "apn-testbed", "APN-TESTBED-TRACE", ""],
    "version": [0, 2, -1, "1", None, 10**30, [1]],
    "command": ["python x.py", [1], None, {"a": "b"}],
    "machine": [None, 5, ["Linux"]], "date": [None, 20261206], "root": [None, [], 0],
    "columns": [[], None, TRACE_COLUMNS[::-1], TRACE_COLUMNS[:-1], TRACE_COLUMNS + ["x"]],
    "files": ["x", None, [["a"]], [["a", 1, 2]], [["a", -1]], [["a", 2**63]], [["a", 1.5]],
              [["a", True]], [["a", "1"]], [[5, 1]], [["../x", 1]], [["/etc/passwd", 1]],
              [["a/../../b", 1]], [["..", 1]], [["", 1]], [[".", 1]], [["a\0b", 1]],
              [["./a", 1]], [["a//b", 1]], [["a/", 1]], [["\ud800", 1]], [{"a": 1}]],
    "streams": ["x", None, [[1]], [[1, 2, 3]], [[-1, 1]], [[1, True]], [[1, 2**63]],
                [[1.0, 2]], [[]], []],
}
BAD_FIELD = [-1, 2**63, 1.5, True, None, "1", [1], math.nan, math.inf]
BAD_OP = ["write", "READ", "", 5, True, None, ["read"], {"op": "read"}]


def _trace_text(head, events):
    """A trace file's text: the header line, then one event a line."""
    return "\n".join([json.dumps(head)] + [json.dumps(e) for e in events]) + "\n"


def trace_cases():
    """(name, bytes) of malformed trace files: each header field missing or wrong, each
    event field wrong, events of the wrong length, op or index, broken JSON and bytes."""
    events = [json.loads(line) for line in TRACE_LINES[1:]]
    cases = []
    for key in TRACE_HEAD:
        cases.append((f"no-{key}", _trace_text({k: v for k, v in TRACE_HEAD.items()
                                                if k != key}, events)))
    for key, values in BAD_HEADER.items():
        for v in values:
            cases.append((f"{key}-{v!r}"[:60], _trace_text({**TRACE_HEAD, key: v}, events)))
    for i, column in enumerate(TRACE_COLUMNS):
        for v in BAD_OP if column == "op" else BAD_FIELD:
            bad = TRACE_EVENT[:i] + [v] + TRACE_EVENT[i + 1:]
            cases.append((f"event-{column}-{v!r}", _trace_text(TRACE_HEAD, events + [bad])))
    for n in (0, 1, 8, 10):
        cases.append((f"event-{n}-fields", _trace_text(TRACE_HEAD, events + [
            (TRACE_EVENT * 2)[:n]])))
    nfiles, nstreams = len(TRACE_HEAD["files"]), len(TRACE_HEAD["streams"])
    for column, n in (("file", nfiles), ("stream", nstreams)):
        i = TRACE_COLUMNS.index(column)
        for v in (n, n + 1, 2**62):
            cases.append((f"event-{column}-{v}-of-{n}", _trace_text(TRACE_HEAD, events + [
                TRACE_EVENT[:i] + [v] + TRACE_EVENT[i + 1:]])))
    cases.append(("event-object", _trace_text(TRACE_HEAD, events + [dict(zip(
        TRACE_COLUMNS, TRACE_EVENT))])))
    cases.append(("event-number", _trace_text(TRACE_HEAD, events + [5])))
    cases.append(("no-files-but-events", _trace_text({**TRACE_HEAD, "files": []}, events)))
    text = _trace_text(TRACE_HEAD, events)
    encoded = [(n, t.encode()) for n, t in cases]
    encoded += [
        ("empty", b""), ("blank", b"\n\n  \n"), ("header-cut", text[:200].encode()),
        ("header-a-list", b"[1, 2]\n"), ("not-json", b"format: apn-testbed-trace\n"),
        ("event-not-json", (text + "[0, 0, 'read']\n").encode()),
        ("event-nan", (text + '[NaN,0,"read",0,3,0,1,1,1]\n').encode()),
        ("event-5000-digits", (text + '[0,0,"read",0,3,0,' + "9" * 5000 + ',1,1]\n').encode()),
        ("event-deep", (text + "[" * 100_000 + "]" * 100_000 + "\n").encode()),
        ("latin1", text.replace("sample", "samplé").encode("latin-1")),
        ("byte-ff-in-event", text.encode() + b'[0,0,"read",0,3,0,1,1,\xff]\n'),
        ("nul-in-header", text[:10].encode() + b"\x00" + text[10:].encode()),
        ("utf16", text.encode("utf-16")), ("bom", b"\xef\xbb\xbf" + text.encode()),
        ("random-bytes", bytes(random.Random(6).randrange(256) for _ in range(300))),
    ]
    return encoded


CHECKPOINT_YAML = REPO / "testbed" / "workload" / "mlperf" / "llama3_8b.yaml"
MODEL_INTS = ("num_layers", "transformer.vocab_size", "transformer.hidden_size",
              "transformer.ffn_hidden_size", "transformer.num_attention_heads",
              "transformer.num_kv_heads", "parallelism.tensor", "parallelism.pipeline")
BAD_COUNT = [0, -1, True, 1.5, "32", None, [32], math.nan]
BAD_CHECKPOINT = {
    "time_between_checkpoints": [-1, -0.5, math.nan, math.inf, -math.inf, True, "5", None,
                                 [5]],
    "num_checkpoints_write": [-1, 0, True, 2.5, math.nan, math.inf, "10", None, 10.0],
    "num_checkpoints_read": [-1, 11, True, 1.5, math.nan, "10", None, 10**30, 10.0],
    "fsync": [1, 0, "True", "yes", None],
    "checkpoint_folder": [5, None, ["x"], True],
}

DELETE = object()


def _set(doc, dotted, value):
    """doc with doc[a][b]... = value (value DELETE: the key removed)."""
    out = copy.deepcopy(doc)
    *path, last = dotted.split(".")
    at = out
    for k in path:
        at = at[k]
    if value is DELETE:
        del at[last]
    else:
        at[last] = value
    return out


def checkpoint_cases():
    """(name, bytes) of malformed checkpoint-only DLIO configs: llama3_8b.yaml with each
    model and checkpoint field made wrong, its sections missing or of the wrong kind."""
    base = yaml.safe_load(CHECKPOINT_YAML.read_text())
    docs = []
    for key in MODEL_INTS:
        docs += [(f"model.{key}-{v!r}", _set(base, f"model.{key}", v)) for v in BAD_COUNT]
    docs += [(f"model.parallelism.zero_stage-{v!r}",
              _set(base, "model.parallelism.zero_stage", v))
             for v in (-1, 4, True, 3.0, "3", None)]
    for key in ("model_datatype", "optimizer_datatype"):
        docs += [(f"model.{key}-{v!r}", _set(base, f"model.{key}", v))
                 for v in ("fp8", "FP16", "", None, 16, ["fp16"])]
    docs += [(f"model.{k}-{v!r}", _set(base, f"model.{k}", v)) for k, v in (
        ("type", "cnn"), ("type", DELETE), ("name", 5), ("bogus", 1),
        ("parallelism.data", 2), ("parallelism.pipeline", 2),  # with ZeRO-3
        ("transformer", None), ("transformer.x", {"a": 1}))]
    docs += [("pipeline-above-layers", _set(_set(base, "model.parallelism.zero_stage", 1),
                                            "model.parallelism.pipeline", 64))]
    for key, values in BAD_CHECKPOINT.items():
        docs += [(f"checkpoint.{key}-{v!r}", _set(base, f"checkpoint.{key}", v))
                 for v in values]
    docs += [("no-num_checkpoints_write", _set(base, "checkpoint.num_checkpoints_write",
                                               DELETE)),
             ("no-model", _set(base, "model", DELETE)), ("model-list", _set(base, "model", [1])),
             ("checkpoint-list", _set(base, "checkpoint", [1])),
             ("checkpoint-none", _set(base, "checkpoint", None)),
             ("workflow-checkpoint-string", _set(base, "workflow.checkpoint", "True"))]
    encoded = [(n, yaml.safe_dump(d, sort_keys=False).encode()) for n, d in docs]
    text = CHECKPOINT_YAML.read_text()
    encoded += [("tab-indented", text.replace("  ", "\t").encode()),
                ("cut", text[:len(text) // 2].encode()),
                ("latin1", text.replace("llama_8b", "llamé").encode("latin-1"))]
    return encoded


FILES = file_cases()
PARAMS = param_cases()
TRACES = trace_cases()
CHECKPOINTS = checkpoint_cases()


def test_there_are_enough_cases():
    assert len(FILES) + len(PARAMS) >= 300, (len(FILES), len(PARAMS))
    assert len(TRACES) >= 100 and len(CHECKPOINTS) >= 100, (len(TRACES), len(CHECKPOINTS))


def one_line_exit_2(argv, capsys):
    with cpu_budget.measured(" ".join(argv)) as spent:
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
    err = capsys.readouterr().err
    assert not cpu_budget.over(spent[0]), (argv, cpu_budget.over(spent[0]))
    assert code == 2, (argv, code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("testbed: error: "), (argv, err)
    assert "Traceback" not in err
    return lines[0]


def _ours():
    netns = Path("/run/netns")
    state = Path(os.environ.get("APN_STATE_DIR", "/run/apn-testbed"))
    return ({n for n in os.listdir(netns) if n.startswith("tb")} if netns.is_dir() else set(),
            {n for n in os.listdir(state)} if state.is_dir() else set())


@pytest.mark.parametrize("name,content", FILES, ids=[n for n, _ in FILES])
def test_malformed_file(name, content, tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_bytes(content)
    line = one_line_exit_2(["run", str(f), "--check"], capsys)
    assert str(f) in line or "sweep has" in line, line


@pytest.mark.parametrize("name,pair", PARAMS, ids=[n for n, _ in PARAMS])
def test_malformed_param(name, pair, capsys):
    one_line_exit_2(["run", "experiments/demo.toml", "--check", "-p", pair], capsys)


GOOD = [(d.name, text) for d in dims.DIMENSIONS for text in GOOD_TEXT.get(d.kind, ())]


@pytest.mark.parametrize("knob,text", GOOD, ids=[f"{k}={t}" for k, t in GOOD])
def test_a_bad_text_a_knob_takes_runs(knob, text, capsys):
    """The few BAD_TEXT values a knob takes (`nocto=true`) are cases too: they run."""
    assert cli.main(["run", "experiments/demo.toml", "--check", "-p", f"{knob}={text}"]) == 0
    assert capsys.readouterr().err == ""


def test_every_bad_text_is_a_case():
    """No -p text is dropped: every knob meets every BAD_TEXT, refused or run."""
    refused = {pair for _, pair in PARAMS}
    taken = {f"{k}={t}" for k, t in GOOD}
    every = {f"{d.name}={t}" for d in dims.DIMENSIONS for t in BAD_TEXT}
    assert every <= refused | taken and not refused & taken, every - refused - taken


@pytest.mark.parametrize("name,content", TRACES, ids=[n for n, _ in TRACES])
def test_malformed_trace(name, content, tmp_path, capsys):
    """[workload] trace naming a malformed trace file: one line naming the trace."""
    trace = tmp_path / "bad.trace"
    trace.write_bytes(content)
    exp = tmp_path / "x.toml"
    exp.write_text('[fixed]\nworkers = 1\n[workload]\ntrace = "bad.trace"\n')
    line = one_line_exit_2(["run", str(exp), "--check"], capsys)
    assert str(trace) in line, line


@pytest.mark.parametrize("name,content", CHECKPOINTS, ids=[n for n, _ in CHECKPOINTS])
def test_malformed_checkpoint(name, content, tmp_path, capsys):
    """--dlio naming a malformed checkpoint-only config: one line naming the config."""
    config = tmp_path / "bad.yaml"
    config.write_bytes(content)
    line = one_line_exit_2(["run", "--dlio", str(config), "--check"], capsys)
    assert str(config) in line, line


@pytest.mark.parametrize("argv", flag_cases(), ids=lambda a: " ".join(a) or "none")
def test_malformed_flags(argv, capsys):
    one_line_exit_2(argv, capsys)


def test_bad_input_creates_nothing_even_without_check(tmp_path):
    """Without --check (and as root, where `run` would build): validation comes first."""
    before = _ours()
    rng = random.Random(7)
    for name, content in rng.sample(FILES, 12):
        f = tmp_path / "bad.toml"
        f.write_bytes(content)
        proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(f), "--out",
                               str(tmp_path / "out")], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, \
            (name, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert _ours() == before
    assert not (tmp_path / "out" / "results.csv").exists()


def test_docs_state_what_runs():
    """docs/robustness.md and docs/experiments.md give the number of cases this file
    feeds the validator; they must say what it runs."""
    n = f"{len(FILES) + len(PARAMS) + len(TRACES) + len(CHECKPOINTS):,}"
    for page in ("docs/robustness.md", "docs/experiments.md"):
        said = re.findall(r"test_fuzz\.py` feeds (?:the validator|it)\s+([\d,]+) malformed",
                          (REPO / page).read_text())
        assert said == [n], (page, said, n)


def test_docs_state_the_cpu_budget_the_tests_hold():
    """docs/robustness.md's "under N s of CPU" is cpu_budget.STATED_S, which every call
    here and in test_fuzz_properties.py is held to (with its margin for load)."""
    said = re.findall(r"under (\d+(?:\.\d+)?) s of\s+CPU",
                      (REPO / "docs" / "robustness.md").read_text())
    assert [float(s) for s in said] == [cpu_budget.STATED_S], said
    assert cpu_budget.STATED_S <= cpu_budget.BUDGET_S <= 2 * cpu_budget.STATED_S
