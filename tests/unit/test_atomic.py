"""Results files land whole or not at all (testbed/atomic.py): a replaced file is the old
or the new one, an append that fails leaves the file as it was, and a refusal by the
system is one ResultsError line naming the file."""

import errno

import pytest

from testbed import atomic
from testbed.errors import ResultsError


def test_write_text_replaces_and_leaves_no_temporary(tmp_path):
    f = tmp_path / "meta.json"
    f.write_text("old")
    atomic.write_text(f, "new")
    assert f.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]


def test_a_failed_replacement_keeps_the_old_file(tmp_path):
    f = tmp_path / "summary.csv"
    f.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic.replacing(f) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert f.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.csv"]


def test_the_temporary_keeps_the_suffix(tmp_path):
    with atomic.replacing(tmp_path / "plot.png") as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path
        tmp.write_bytes(b"png")
    assert (tmp_path / "plot.png").read_bytes() == b"png"


def test_an_append_that_fails_is_cut_back(tmp_path, monkeypatch):
    """A full disk mid-row (the write raising ENOSPC after part of it went out) leaves
    results.csv as it was before the append, and says so in one line."""
    f = tmp_path / "results.csv"
    f.write_text("a,b\n1,2\n")
    with pytest.raises(ResultsError) as err:
        with atomic.appending(f) as fh:
            fh.write("3,")
            fh.flush()  # part of the row is on disk
            raise OSError(errno.ENOSPC, "No space left on device")
    assert f.read_text() == "a,b\n1,2\n"
    assert "No space left on device" in str(err.value) and str(f) in str(err.value)
    assert "\n" not in str(err.value)


def test_an_append_that_succeeds_is_whole(tmp_path):
    f = tmp_path / "steps.csv"
    with atomic.appending(f) as fh:
        fh.write("x\n")
    with atomic.appending(f) as fh:
        fh.write("y\n")
    assert f.read_text() == "x\ny\n"


def test_a_folder_that_refuses_is_one_line(tmp_path):
    with pytest.raises(ResultsError, match="cannot write"):
        atomic.write_text(tmp_path / "missing" / "meta.json", "{}")
    with pytest.raises(ResultsError, match="cannot write"):
        with atomic.appending(tmp_path / "missing" / "results.csv"):
            pass
