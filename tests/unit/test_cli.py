"""The CLI without root: topology listing/showing and one-line errors."""

import json
import subprocess
import sys

import pytest

from testbed.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True,
                          text=True, timeout=60)


def test_topo_list(capsys):
    assert main(["topo", "list"]) == 0
    text = capsys.readouterr().out
    for name in ("apn", "local", "metro", "two-sites"):
        assert name in text


def test_topo_show_json(capsys):
    assert main(["topo", "show", "apn", "-p", "workers=3", "-p", "distance_km=1000",
                 "-p", "rate=200mbit", "-p", "loss_pct=0.01", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (fibre,) = [l for l in data["links"] if l["kind"] == "fibre"]
    assert {"a", "b", "delay_ms", "loss_pct", "rate_mbit", "limit_pkts"} <= set(fibre)
    assert fibre["delay_ms"] == pytest.approx(4.9, abs=0.01)
    assert fibre["rate_mbit"] == 200 and fibre["loss_pct"] == 0.01
    assert len(data["hosts"]) == 4


@pytest.mark.parametrize("args,needle", [
    (["topo", "show", "nope"], "unknown topology"),
    (["topo", "show", "apn", "-p", "distance_km=-3"], "distance_km"),
    (["topo", "show", "apn", "-p", "bogus"], "KEY=VALUE"),
])
def test_bad_input_is_one_line(args, needle):
    proc = run_cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


HELP = [[], ["topo"], ["topo", "list"], ["topo", "show"], ["up"], ["clean"], ["run"],
        ["demo"], ["probe"], ["analyse"], ["knobs"], ["trace"], ["trace", "record"],
        ["trace", "show"]]


def test_knobs_lists_the_dimension_table(capsys):
    from testbed.experiment.plan.dimensions import DIMENSIONS
    assert main(["knobs"]) == 0
    text = capsys.readouterr().out
    assert all(d.name in text for d in DIMENSIONS)
    assert "[server] threads" in text and "[mounts.NAME]" in text  # not eaten as markup


@pytest.mark.parametrize("args", HELP, ids=lambda a: " ".join(a) or "testbed")
def test_help_of_every_command(args):
    proc = run_cli(*args, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: testbed") and "Traceback" not in proc.stderr


def test_every_command_has_help_listed():
    import argparse
    import re
    from testbed.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = {"topo", "knobs", "up", "clean", "run", "demo", "advise", "probe", "analyse",
                "report", "docs", "trace"}
    assert commands <= set(sub.choices), commands - set(sub.choices)
    text = parser.format_help()
    for cmd in sorted(sub.choices):  # each on a line of its own, with its help text
        assert re.search(rf"^\s+{cmd}\s+\S", text, re.M), cmd


def test_run_check_of_every_shipped_experiment():
    from testbed.experiment import REPO
    for f in sorted((REPO / "experiments").glob("*.toml")):
        proc = run_cli("run", str(f), "--check")
        assert proc.returncode == 0, (f, proc.stderr)
        assert "estimated run time" in proc.stdout
