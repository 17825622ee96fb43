"""Hostile inputs found by trying the CLI as a new user would (2026-12-04), each now one
line on stderr naming the file, key and value and what is allowed, exit 2, no traceback:
regression cases for the fuzz test's generated ones."""

import os

import pytest

from testbed import cli


def run(capsys, *argv):
    """Exit status and stderr of `testbed ARGV`."""
    code = cli.main(list(argv))
    err = capsys.readouterr().err
    return code, err


def one_line(err):
    lines = [x for x in err.splitlines() if x.strip()]
    return len(lines) == 1 and "Traceback" not in err


def plan_file(tmp_path, text, name="x.toml"):
    f = tmp_path / name
    f.write_text(text)
    return str(f)


CASES = [
    # (file text, what the line must say)
    ("x = " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    ("[workload]\nx = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n", "nested too deeply"),
    ('[fixed]\nrate = "1kbit"\n', "rate = '1kbit': out of range: a rate in Mbit/s or text like "
                                  "10gbit 1 .. 100000 Mbit/s"),
    ("[fixed]\nrate = 1e-300\n", "out of range"),
    ('[fixed]\nrate = "0mbit"\n', "'0mbit': out of range"),
    ("[sweep]\ndistance_km = [0.0, -0.0]\n", "listed twice"),
    ("[search]\nknob = 'distance_km'\nrange = [0, 3000]\ntarget = 'au_pct >= 200'\n"
     "tolerance = 100\n", "au_pct lies between 0 and 100"),
    ("[dataset]\nfiles = 2\n[workload]\nreaders = 4\nprefetch = 4\n",
     "fewer than twice the 4 files read at once"),
    ("", "nothing to measure"),
    ('name = "only-a-name"\n', "nothing to measure"),
]


@pytest.mark.parametrize("text,needle", CASES, ids=range(len(CASES)))
def test_bad_files_are_one_line(tmp_path, capsys, text, needle):
    code, err = run(capsys, "run", plan_file(tmp_path, text), "--check")
    assert code == 2 and one_line(err), err[-500:]
    assert needle in err, err


def test_paths_that_are_not_files(tmp_path, capsys):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path, needle in ((str(tmp_path / ("a" * 300 + ".toml")), "too long"),
                         (str(tmp_path), "is a directory"),
                         (str(fifo), "not a regular file"),
                         (str(tmp_path / "missing.toml"), "not found")):
        code, err = run(capsys, "run", path, "--check")
        assert code == 2 and one_line(err) and needle in err, err[-300:]


def test_command_line_values(capsys):
    code, err = run(capsys, "demo", "--check", "-p", "rate=1gbit", "-p", "rate=2gbit")
    assert code == 2 and one_line(err) and "given twice" in err
    code, err = run(capsys, "demo", "--check", "-p", "fibre.*.loss_pct=100")
    assert code == 2 and one_line(err) and "fibre.*.loss_pct = '100'" in err
    # a bad value is named as bad before the demo's [search] is mentioned
    code, err = run(capsys, "demo", "--check", "-p", "distance_km=-5")
    assert code == 2 and one_line(err) and "out of range" in err and "search" not in err
    code, err = run(capsys, "demo", "--check", "-p", "distance_km=5")
    assert code == 2 and "demo.toml searches this knob" in err
    code, err = run(capsys, "topo", "show", "apn", "-p", "workers=65535")
    assert code == 2 and one_line(err) and "1 .. 1024" in err


def test_a_dlio_path_in_a_symlink_loop(tmp_path, capsys):
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    code, err = run(capsys, "run", "--dlio", str(tmp_path / "a.yaml"), "--check")
    assert code == 2 and one_line(err), err[-300:]


def test_a_file_too_large_to_be_a_description_is_one_line(tmp_path, capsys):
    """Parsing megabytes would cost seconds before the first check: an experiment file
    over 256 KiB and a DLIO config over 64 KiB are refused by their size."""
    big = tmp_path / "big.toml"
    big.write_text('name = "x"\n# ' + "x" * (300 << 10) + "\n")
    code, err = run(capsys, "run", str(big), "--check")
    assert code == 2 and one_line(err)
    assert "is too large (experiment file: at most 262,144 bytes)" in err
    yml = tmp_path / "big.yaml"
    yml.write_text("model: {}\n# " + "x" * (70 << 10) + "\n")
    code, err = run(capsys, "run", "--dlio", str(yml), "--check")
    assert code == 2 and one_line(err)
    assert "is too large (DLIO config: at most 65,536 bytes)" in err
