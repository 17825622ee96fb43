"""`testbed report DIR --markdown` and `testbed docs [--check]`: the markdown of a small
synthetic results folder, stale and fresh generated blocks, one-line errors, and that
the checkout's README.md and docs/*.md hold what their results folders generate."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from testbed import cli, docs, suite
from testbed.errors import SpecError
from testbed.experiment.report import markdown
from testbed.paths import REPO

SUMMARY = [
    {"point_id": "distance_km=0|mount=default", "site": "wan", "n": 1, "failed": 0,
     "au_pct": 99.62, "au_pct_ci": 0.01, "slowdown_pct": 0.0, "slowdown_pct_ci": 0.04,
     "throughput_MB_s": 83.36, "throughput_MB_s_ci": float("nan"), "rtt_ms": 0.0,
     "model_MB_s": 83.886, "limited_by": "compute", "emulator_limited": False,
     "emulator_reason": float("nan"), "distance_km": 0.0, "mount": "default"},
    {"point_id": "distance_km=3000|mount=default", "site": "wan", "n": 1, "failed": 0,
     "au_pct": 67.71, "au_pct_ci": 1.04, "slowdown_pct": 46.93, "slowdown_pct_ci": 2.2,
     "throughput_MB_s": 56.7, "throughput_MB_s_ci": float("nan"), "rtt_ms": 29.4,
     "model_MB_s": 56.2, "limited_by": "emulator", "emulator_limited": True,
     "emulator_reason": "cpu", "distance_km": 3000.0, "mount": "default"},
]
SEARCH = ("setting,knob,target,meets_up_to,fails_from,metric_at_meets,metric_at_fails,"
          "crossing,uncertainty,points,note\n"
          "mount=default,distance_km,au_pct >= 90,1750.0,1875.0,92.18,88.99,1812.5,62.5,8,\n")
META = {"environment": {"kernel": "7.2.7", "kernel_kind": "uml", "cpus": 1,
                        "git_commit": "e18d065a78207613cdbb7fd74943f2f2e7b6824e"}}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "results" / "demo"
    d.mkdir(parents=True)
    pd.DataFrame(SUMMARY).to_csv(d / "summary.csv", index=False)
    (d / "search.csv").write_text(SEARCH)
    (d / "meta.json").write_text(json.dumps(META))
    (d / "record.json").write_text(json.dumps({"date": "2026-12-04", "command": "testbed demo"}))
    return d


def _event_row(path: str, prefetch: int, event: str, duration: float, lost: float,
               model: float, why: str, failed: int = 0) -> dict:
    pid = (f"data_path={path}|prefetch={prefetch}|event={event}|"
           f"event_duration_s={duration:g}|distance_km={0 if event == 'none' else 3000}")
    return {"point_id": pid, "site": "wan", "n": 1, "failed": failed, "au_pct": 90.0,
            "au_pct_ci": 1.0, "slowdown_pct": 1.0, "slowdown_pct_ci": 0.1,
            "throughput_MB_s": 3000.0, "throughput_MB_s_ci": 1.0, "rtt_ms": 29.4,
            "model_MB_s": 3177.0, "limited_by": "compute", "emulator_limited": False,
            "emulator_reason": float("nan"), "data_path": path, "prefetch": prefetch,
            "event": event, "event_duration_s": duration, "distance_km": 3000.0,
            "event_what": f"{event} {duration:g} s",
            "event_extra_s": lost if event != "none" else float("nan"),
            "event_model_extra_s": model, "event_limited_by": why}


def test_by_event_grid_rows_settings_columns_events(tmp_path: Path):
    """--by-event: a row per data path x prefetch, a column per event kind and duration,
    each cell the seconds lost (the model's, what set it); baselines left out; a failed
    point says so."""
    d = tmp_path / "ev"
    d.mkdir()
    rows = [_event_row("direct", 2, "none", 1, 0, float("nan"), "")]
    for path in ("direct", "cache"):
        for ev, dur in (("down", 0.05), ("down", 10), ("reroute", 10)):
            rows.append(_event_row(path, 2, ev, dur, 1.5, 1.25, "queue_drained",
                                   failed=int(path == "cache" and ev == "reroute")))
    pd.DataFrame(rows).to_csv(d / "summary.csv", index=False)
    (d / "meta.json").write_text(json.dumps(META))
    lines = markdown.render(d, "testbed report ev --markdown --by-event",
                            by_event=True).splitlines()
    assert lines[:4] == [
        "| data_path | down 0.05 s | down 10 s | reroute 10 s |", "|---|---|---|---|",
        "| direct | 1.50 (1.25, queue_drained) | 1.50 (1.25, queue_drained) "
        "| 1.50 (1.25, queue_drained) |",
        "| cache | 1.50 (1.25, queue_drained) | 1.50 (1.25, queue_drained) | failed |"]
    assert docs.run_marker("testbed report ev --markdown --by-event", tmp_path) == \
        "\n".join(lines) + "\n"
    rows[1].update(emulator_limited=True, emulator_reason="queue")
    pd.DataFrame(rows).to_csv(d / "summary.csv", index=False)
    assert "| direct | 1.50 (1.25, queue_drained) [emulator: queue] |" in \
        markdown.render(d, by_event=True)
    with pytest.raises(SpecError, match="no fibre events"):
        markdown.event_table(markdown.Folder(d, pd.DataFrame(SUMMARY),
                                             ["distance_km", "mount"]))


def test_markdown_of_a_results_folder(folder: Path):
    text = markdown.render(folder, "testbed report results/demo --markdown")
    assert text.splitlines()[:4] == [
        "| km | mount | RTT ms | MB/s | AU % (95 % CI) | slowdown % | model MB/s | limited by |",
        "|---|---|---|---|---|---|---|---|",
        "| 0 | default | 0.00 | 83.4 | 99.6 ± 0.0 | 0.0 ± 0.0 | 83.9 | compute |",
        "| 3000 | default | 29.40 | 56.7 | 67.7 ± 1.0 | 46.9 ± 2.2 | 56.2 | emulator (cpu) |"]
    assert ("au_pct >= 90 for mount=default: up to distance_km = 1812.5 ± 62.5 (met at "
            "1750: 92.2; not at 1875: 88.99; 8 points)") in text
    assert text.rstrip().splitlines()[-1] == (
        "Generated by `testbed report results/demo --markdown` from a run at commit e18d065 "
        "(2026-12-04; user-mode Linux 7.2.7, 1 CPU): `testbed demo`.")


def test_repetitions_add_an_n_column(folder: Path):
    rows = [{**r, "n": 3} for r in SUMMARY]
    pd.DataFrame(rows).to_csv(folder / "summary.csv", index=False)
    lines = markdown.render(folder).splitlines()
    assert lines[0].endswith("| limited by | n |") and lines[2].endswith("| compute | 3 |")


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path: Path, capsys):
    assert cli.main(["report", str(tmp_path / "nope"), "--markdown"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such results folder" in err


def _page(root: Path, body: str) -> Path:
    page = root / "README.md"
    page.write_text("# x\n\n<!-- generated: testbed report results/demo --markdown -->\n"
                    + body + "<!-- end generated -->\n\nafter\n")
    return page


def test_docs_rewrites_stale_blocks_and_check_finds_them(folder: Path):
    root = folder.parent.parent
    page = _page(root, "| a hand-edited table |\n")
    assert [b.stale for b in docs.update(root, check=True)] == [True]
    assert "hand-edited" in page.read_text()          # --check changes nothing
    assert [b.stale for b in docs.update(root)] == [True]
    assert "| 3000 | default |" in page.read_text() and page.read_text().endswith("after\n")
    assert [b.stale for b in docs.update(root, check=True)] == [False]


def test_only_the_report_command_may_generate(tmp_path: Path):
    (tmp_path / "README.md").write_text("<!-- generated: rm -rf / -->\n<!-- end generated -->")
    with pytest.raises(SpecError, match=r"only `testbed report DIR --markdown \[--by-event\]` "
                                        "or `testbed docs --tests`"):
        docs.update(tmp_path, check=True)
    (tmp_path / "README.md").write_text("<!-- generated: testbed report x --markdown --rm -->"
                                        "\n<!-- end generated -->")
    with pytest.raises(SpecError, match="only"):
        docs.update(tmp_path, check=True)



SUITE = {
    "unit/test_u.py": "import pytest\ndef test_a(): pass\ndef test_b(): pass\n"
                      "@pytest.mark.system\ndef test_c(): pass\n",
    "lab/test_l.py": "import pytest\n@pytest.mark.lab\ndef test_l(): pass\n",
    "system/test_s.py": "import pytest\npytestmark = pytest.mark.system\n"
                        "def test_s(): pass\n@pytest.mark.rdma\ndef test_r(): pass\n",
}


def test_the_suite_block_counts_what_pytest_collects(tmp_path: Path):
    """`testbed docs --tests`: per lab/test run, what pytest collects with its marks."""
    for name, text in SUITE.items():
        (tmp_path / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / name).write_text(text)
    (tmp_path / "README.md").write_text("<!-- generated: testbed docs --tests -->\n"
                                        "| 2,365 unit tests |\n<!-- end generated -->\n")
    assert [b.stale for b in docs.update(tmp_path)] == [True]
    text = (tmp_path / "README.md").read_text()
    counts = [line.split(" | ")[3] for line in text.splitlines() if line.startswith("| ")][1:]
    assert counts == ["2", "1", "1", "1"], text
    assert "5 tests; `sudo lab/test` runs 4 of them and leaves out 1." in text


def test_the_suite_runs_what_lab_test_runs():
    """suite.PARTS holds the marks lab/test runs with (-m MARKS), and no others."""
    script = (REPO / "lab" / "test").read_text()
    used = {a or b for a, b in re.findall(r'-m "([^"$]+)"|-m (\w+)', script)} - {"pytest"}
    assert {p.marks for p in suite.PARTS} == used, used


def test_readme_and_docs_generated_blocks_are_up_to_date():
    blocks = docs.update(REPO, check=True)
    assert blocks, "README.md should hold the demo's generated table"
    stale = [f"{b.file}: {b.command}" for b in blocks if b.stale]
    assert not stale, "run `testbed docs` to regenerate: " + ", ".join(stale)


def test_an_empty_summary_is_one_line_and_exit_1(folder: Path, capsys):
    (folder / "summary.csv").write_text("")
    assert cli.main(["report", str(folder), "--markdown"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "summary.csv" in err


def test_readme_stays_a_newcomers_page():
    """README is a newcomer's page: at most README_LINES lines, and every command of the
    CLI is a link to its page (the measurement record lives in docs/)."""
    import argparse
    from testbed import cli
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_LINES
    sub = next(a for a in cli.build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    links = re.findall(r"\[([^\]]+)\]\((?:docs|traces)/", text)
    linked = {name for name in sub.choices for link in links
              if re.search(rf"`{name}\b[^`]*`", link)}
    assert linked == set(sub.choices), set(sub.choices) - linked


README_LINES = 250
