"""Recorded traces: strace's lines parsed (unfinished/resumed, pread64, lseek, threads and
forks), a real command recorded on the host, a trace replayed into a generated dataset,
malformed trace files and a missing strace refused in one line. Timings are checked only
against loose bounds (the machine is shared)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.errors import ServiceError, SpecError, WorkloadError
from testbed.paths import REPO
from testbed.workload import strace, trace, tracefile
from testbed.workload.replay import replay, stream_gaps, summarise
from testbed.workload.tracefile import Event, Trace
from testbed.workload.window import au

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="no strace")
D = "/data"
# strace -f -ttt -T -y -s 0 output: a main thread (100), a thread of it (101, made with
# CLONE_THREAD) and a forked process (102); two calls split by another thread's.
LINES = f"""\
100 1000.000000 openat(AT_FDCWD</work>, "/usr/lib/python3.11/os.py", O_RDONLY|O_CLOEXEC) = 3</usr/lib/python3.11/os.py> <0.000010>
100 1000.000100 openat(AT_FDCWD</work>, "a.bin", O_RDONLY|O_CLOEXEC) = 3<{D}/a.bin> <0.000020>
100 1000.000200 read(3<{D}/a.bin>, ""..., 4096) = 4096 <0.000050>
100 1000.000300 clone3({{flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM, child_tid=0x1, exit_signal=0}} => {{parent_tid=[101]}}, 88) = 101 <0.000100>
101 1000.001000 read(3<{D}/a.bin>, <unfinished ...>
100 1000.001100 lseek(3<{D}/a.bin>, 10000, SEEK_SET <unfinished ...>
101 1000.001500 <... read resumed>""..., 100) = 100 <0.000500>
100 1000.001600 <... lseek resumed>) = 10000 <0.000500>
100 1000.002000 read(3<{D}/a.bin>, ""..., 8192) = 8192 <0.000030>
100 1000.003000 pread64(3<{D}/a.bin>, ""..., 512, 65536) = 512 <0.000040>
100 1000.003500 openat(AT_FDCWD</work>, "nope", O_RDONLY) = -1 ENOENT (No such file or directory) <0.000005>
100 1000.003600 openat(AT_FDCWD</work>, "out.bin", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 4<{D}/out.bin> <0.000005>
100 1000.004000 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 102 <0.000400>
102 1000.005000 readv(3<{D}/a.bin>, [...], 2) = 30 <0.000010>
102 1000.005100 openat(AT_FDCWD</work>, "we>ird,dir/b\\"c \\303\\251", O_RDONLY) = 5<{D}/we\\76ird,dir/b\\"c \\303\\251> <0.000010>
102 1000.005200 read(5<{D}/we\\76ird,dir/b\\"c \\303\\251>, ""..., 64) = 64 <0.000010>
102 1000.006000 close(5<{D}/we\\76ird,dir/b\\"c \\303\\251>) = 0 <0.000010>
100 1000.007000 close(3<{D}/a.bin>) = 0 <0.000010>
100 1000.007100 +++ exited with 0 +++
100 1000.007200 --- SIGCHLD {{si_signo=SIGCHLD}} ---
"""


def test_unfinished_and_resumed_calls_are_joined():
    calls = list(strace.parse_lines(LINES.splitlines()))
    read = next(c for c in calls if c.tid == 101)
    assert (read.name, read.t_s, read.ret, read.dur_s) == ("read", 1000.001, 100, 0.0005)
    assert read.args == [f"3<{D}/a.bin>", '""...', "100"]
    seek = next(c for c in calls if c.name == "lseek")
    assert seek.ret == 10000 and seek.t_s == 1000.0011
    failed = next(c for c in calls if c.args[1:2] == ['"nope"'])
    assert failed.ret == -1 and failed.errno == "ENOENT"
    assert not any("+++" in c.name or "---" in c.name for c in calls)


def test_escaped_paths_and_arguments():
    assert strace.fd_arg('5</a/we\\76ird,x\\"y \\303\\251>') == (5, '/a/we>ird,x"y é')
    assert strace.fd_arg("AT_FDCWD</w>") == (None, "/w")
    args, rest = strace.split_args('3<a,b>, [{x=1, y=2}, ...], "s,)", 2) = 1 <0.1>')
    assert args == ["3<a,b>", "[{x=1, y=2}, ...]", '"s,)"', "2"] and rest == " = 1 <0.1>"
    assert strace.split_args("3, 4") is None  # cut short


def test_data_calls_track_offsets_per_process():
    calls = strace.data_calls(strace.parse_lines(LINES.splitlines()), D)
    got = [(c.tid, c.pid, c.op, c.path, c.offset, c.size, c.got) for c in calls]
    assert got == [
        (100, 100, "open", "a.bin", 0, 0, 0),
        (100, 100, "read", "a.bin", 0, 4096, 4096),
        (101, 100, "read", "a.bin", 4096, 100, 100),  # the thread shares the offset
        (100, 100, "read", "a.bin", 10000, 8192, 8192),  # after lseek
        (100, 100, "pread", "a.bin", 65536, 512, 512),  # explicit offset, none moved
        (102, 102, "read", "a.bin", 18192, 30, 30),  # forked: a copy of the parent's
        (102, 102, "open", 'we>ird,dir/b"c é', 0, 0, 0),
        (102, 102, "read", 'we>ird,dir/b"c é', 0, 64, 64),
        (102, 102, "close", 'we>ird,dir/b"c é', 0, 0, 0),
        (100, 100, "close", "a.bin", 0, 0, 0),
    ]  # not: the interpreter's os.py, the failed open, the file opened for writing


def _trace(events: list[tuple], files=(("a.bin", 1 << 20), ("sub/b.bin", 300_000)),
           streams=((1, 1), (1, 2))) -> Trace:
    return Trace(("job",), "test", "2026-12-06T00:00:00Z", "/data", tuple(files),
                 tuple(streams), tuple(Event(*e) for e in events))


# Stream 0 reads a.bin sequentially in 64 KiB reads with 30 ms of compute between bursts
# of two reads; stream 1 preads sub/b.bin at offsets, 10 ms apart.
KIB64 = 65536
REPLAYED = _trace(
    [(0, 0, "open", 0, 3, 0, 0, 0, 10)]
    + [(100 + i * 30_000 + j * 100, 0, "read", 0, 3, (2 * i + j) * KIB64, KIB64, KIB64, 50)
       for i in range(4) for j in range(2)]
    + [(90_400, 0, "close", 0, 3, 0, 0, 0, 10)]
    + [(5_000 + i * 10_000, 1, "pread", 1, 4, 100_000 * (2 - i), 50_000, 50_000, 50)
       for i in range(3)])


def test_replay_reproduces_bytes_and_compute(tmp_path):
    trace.generate(REPLAYED, tmp_path)
    assert (tmp_path / "sub/b.bin").stat().st_size == 300_000
    run = replay(REPLAYED, tmp_path)
    assert run.error is None and run.main == 0
    assert run.bytes == 8 * KIB64 + 3 * 50_000 and run.reads == 11
    assert len(run.steps) == 4 and [s.bytes for s in run.steps] == [2 * KIB64] * 4
    assert len(run.streams[1]) == 3
    nominal = sum(g for g, _ in stream_gaps(REPLAYED)[0][1:]) / 1e6
    assert run.nominal_compute_s == pytest.approx(nominal)
    compute = sum(s.compute_s for s in run.steps)
    assert 0.95 * nominal <= compute <= nominal + 1.0  # a sleep never ends early
    assert 0 < au(run.steps) <= 100
    figures = summarise(run)
    assert figures["au_pct"] == au(run.steps) and -5 <= figures["compute_overshoot_pct"] < 1e3
    slow = replay(REPLAYED, tmp_path, time_scale=2.0)
    assert sum(s.compute_s for s in slow.steps) >= 0.95 * 2 * nominal


def test_replay_needs_the_dataset(tmp_path):
    with pytest.raises(WorkloadError, match="a.bin is missing"):
        replay(REPLAYED, tmp_path)
    trace.generate(REPLAYED, tmp_path)
    (tmp_path / "sub/b.bin").write_bytes(b"short")
    with pytest.raises(WorkloadError, match="5 bytes; the trace needs 300000"):
        replay(REPLAYED, tmp_path)


def test_save_and_load_round_trip(tmp_path):
    path = tracefile.save(REPLAYED, tmp_path / "x.trace")
    head = json.loads(path.read_text().splitlines()[0])
    assert head["format"] == "apn-testbed-trace" and head["version"] == 1
    assert trace.load(path) == REPLAYED
    assert trace.requirements(REPLAYED) == [("a.bin", 1 << 20), ("sub/b.bin", 300_000)]


@needs_strace
def test_record_a_real_command(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.bin").write_bytes(bytes(200_000))
    (data / "helper.py").write_text("VALUE = 1\n")  # code, not data
    job = ("import os, sys, time, helper\nfd = os.open('x.bin', os.O_RDONLY)\n"
           "os.read(fd, 4096); time.sleep(0.05); os.pread(fd, 1000, 150000)\n"
           "os.lseek(fd, 100000, 0); os.read(fd, 8192); os.close(fd)\n")
    out = tmp_path / "job.trace"
    recorded = trace.record([sys.executable, "-c", job], out, cwd=data)
    assert recorded.files == (("x.bin", 200_000),) and len(recorded.streams) == 1
    ops = [(e.op, e.offset, e.size, e.got) for e in recorded.events]
    assert ops == [("open", 0, 0, 0), ("read", 0, 4096, 4096), ("pread", 150000, 1000, 1000),
                   ("read", 100000, 8192, 8192), ("close", 0, 0, 0)]
    assert trace.gaps(recorded)[0] >= 50_000  # the sleep, in microseconds
    assert trace.load(out) == recorded


@needs_strace
def test_a_failing_command_names_its_status(tmp_path):
    with pytest.raises(ServiceError, match="exited with status 3: boom"):
        trace.record([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); "
                      "sys.exit(3)"], tmp_path / "t.trace", root=tmp_path)
    assert not (tmp_path / "t.trace").exists()


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=REPO)


def test_missing_strace_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServiceError, match="strace not found"):
        trace.record(["true"], tmp_path / "t.trace")
    proc = run_cli("trace", "record", "--out", str(tmp_path / "t.trace"), "--", "true",
                   env={**os.environ, "PATH": str(tmp_path)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "strace not found" in lines[0]


GOOD_HEAD = json.dumps({"format": "apn-testbed-trace", "version": 1, "command": ["x"],
                        "machine": "m", "date": "d", "root": "/r",
                        "columns": list(tracefile.COLUMNS), "files": [["a", 10]],
                        "streams": [[1, 1]]})
BAD = [
    ("", "empty"),
    ("{not json\n", "line 1: not JSON"),
    ('{"format": "other"}\n', "not an apn-testbed-trace header"),
    (GOOD_HEAD.replace('"version": 1', '"version": 9') + "\n", "version 9"),
    (GOOD_HEAD.replace('"machine": "m", ', "") + "\n", "lacks machine"),
    (GOOD_HEAD.replace('[["a", 10]]', '[["../a", 10]]') + "\n", "not a plain path"),
    (GOOD_HEAD.replace('[["a", 10]]', '[["/etc/passwd", 10]]') + "\n", "not a plain path"),
    (GOOD_HEAD.replace('[["a", 10]]', '[["a", -1]]') + "\n", "has a size of -1"),
    (GOOD_HEAD + '\n[0,0,"open",0,3,0,0,0]\n', "line 2: an event is a list of 9"),
    (GOOD_HEAD + '\n[0,0,"write",0,3,0,0,0,1]\n', "line 2: op 'write'"),
    (GOOD_HEAD + '\n[0,0,"read",0,3,-5,1,1,1]\n', "offset -5"),
    (GOOD_HEAD + '\n[0,0,"read",0,3,true,1,1,1]\n', "offset True"),
    (GOOD_HEAD + '\n[0,0,"read",0,3,NaN,1,1,1]\n', "offset nan"),
    (GOOD_HEAD + '\n[0,0,"read",3,3,0,1,1,1]\n', "file 3 is not in the header"),
    (GOOD_HEAD + "\n" + "[" * 100_000 + "\n", "line 2: not JSON"),
]


@pytest.mark.parametrize("text,needle", BAD, ids=[n for _, n in BAD])
def test_malformed_traces_are_refused(tmp_path, text, needle):
    path = tmp_path / "bad.trace"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        trace.load(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_malformed_trace_is_one_cli_line(tmp_path):
    path = tmp_path / "bad.trace"
    path.write_text(GOOD_HEAD + '\n[0,0,"write",0,3,0,0,0,1]\n')
    proc = run_cli("trace", "show", str(path))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "op 'write'" in lines[0]


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.one_of(st.just(GOOD_HEAD), st.text(max_size=40),
                                st.lists(st.one_of(st.integers(-2, 2**64), st.text(max_size=3),
                                                   st.booleans(), st.none()),
                                         max_size=10).map(json.dumps)), max_size=4))
def test_any_file_loads_or_is_refused(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("fuzz") / "t.trace"
    path.write_text("\n".join(lines), errors="surrogatepass")
    try:
        trace.load(path)
    except SpecError as exc:
        assert "\n" not in str(exc)


def test_the_shipped_example():
    path = REPO / "traces" / "example-loader.trace"
    assert path.stat().st_size < 200 * 1024
    shipped = trace.load(path)
    assert shipped.files and shipped.events and len(shipped.streams) >= 1
    proc = run_cli("trace", "show", str(path))
    assert proc.returncode == 0, proc.stderr
    for label in ("files", "bytes read", "reads", "read sizes", "streams", "compute gaps",
                  "duration"):
        assert label in proc.stdout
