"""Bad input never gives a traceback: generated malformed experiment files, -p values and
command-line flags each give exactly one line on stderr, exit status 2, and nothing in the
kernel (no namespace, no run registry).

Cases are generated from the dimension table (every knob, in [fixed], [sweep] and its own
table), every table's unknown keys, wrong table types, non-UTF-8 bytes, broken TOML and
-p text (wrong types, out of range, NaN/inf, huge, empty, Unicode and full-width digits).
"""

import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import cli
from testbed.experiment import dimensions as dims
from testbed.paths import REPO

BAD_BY_KIND = {
    "int": ["4", 4.5, True, -1, 10**30, math.nan, math.inf, [], {"a": 1}, "４", ""],
    "float": ["1", True, math.nan, math.inf, -math.inf, -1.0, 1e308, [], "", "１"],
    "bool": ["yes", 1, 0.5, [], "true"],
    "rate": ["fast", -1, 0, 1e9, True, "１gbit", math.nan, "10 gbps", []],
    "choice": [5, "nope", True, "", [], "ｒａｗ"],
    "str_list": [5, [], [1], ["9"], [["3"]]],
    "auto": ["fast", -1, 0, 1e9, True, math.nan, "AUTO", "２", []],
}
BAD_TEXT = ["abc", "", "nan", "inf", "-inf", "1e999", "４", "١٢", "-1", "99999999999999999999",
            "1.5.2", "0x10", "1_000", " ", "true", "[1]"]
TABLES = ("fixed", "sweep", "search", "mounts.fast", "dataset", "workload", "server",
          "cache", "staging", "capture")


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
    if d.kind == "rate":
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
            if d.section and d.section != "mounts":
                cases.append((f"{d.section}-{d.name}-{v!r}",
                              f"[{d.section}]\n{d.section_key} = {toml_value(v)}\n"))
            if d.section == "mounts":
                cases.append((f"profile-{d.name}-{v!r}", f"[fixed]\nmount = \"x\"\n"
                              f"[mounts.x]\n{d.name} = {toml_value(v)}\n"))
    for table in TABLES:
        cases.append((f"unknown-in-{table}", f"[{table}]\nbogus_key = 1\n"))
    for key in ("bogus", "topologyy", "repetition", "nme"):
        cases.append((f"unknown-top-{key}", f"{key} = 1\n"))
    for table in ("fixed", "sweep", "search", "mounts", "dataset", "workload", "capture"):
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
    """(name, -p KEY=VALUE) cases: every knob with bad text, and malformed pairs."""
    cases = []
    for d in dims.DIMENSIONS:
        for text in BAD_TEXT:
            try:
                d.parse(text, text=True)
                continue  # valid for this knob ("true" for a bool, "1" for ...)
            except ValueError:
                cases.append((f"p-{d.name}-{text!r}", f"{d.name}={text}"))
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


FILES = file_cases()
PARAMS = param_cases()


def test_there_are_enough_cases():
    assert len(FILES) + len(PARAMS) >= 300, (len(FILES), len(PARAMS))


def one_line_exit_2(argv, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
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


def test_readme_and_docs_state_what_runs():
    """README and docs/experiments.md give the number of cases this file feeds the
    validator; they must say what it runs."""
    n = f"{len(FILES) + len(PARAMS):,}"
    for page in ("README.md", "docs/experiments.md"):
        said = re.findall(r"test_fuzz\.py` feeds (?:the validator|it)\s+([\d,]+) malformed",
                          (REPO / page).read_text())
        assert said == [n], (page, said, n)
