"""A folder of advise answers (advice.json per cell) tabled by `testbed report`: the
record advise writes, read back into one row per cell with its verdict."""

import json

from testbed import cli
from testbed.experiment.advise import advice_grid
from testbed.experiment.advise import advise as adv
from testbed.experiment.plan import plan as plan_mod


def answer(tmp_path, name, **kw):
    s = adv.Scenario(**{"workload": "unet3d-h100", "distance_km": 3000, **kw})
    f = tmp_path / f"{name}.toml"
    f.write_text(adv.experiment_text(s))
    a = adv.advise(plan_mod.load(f), adv.Goal("slowdown_pct", 1))
    return s, a


def test_a_grid_of_answers_is_one_table_with_verdicts(tmp_path, capsys):
    s, a = answer(tmp_path, "a")
    advice_grid.record(tmp_path / "grid" / "unet3d-3000km-1gpu", s, a, [], 0.5)
    v = adv.Verdict(99.9, 0.1, 0.1, 0.2, 3170.0, 3177.0, "compute", 3, True, "ok")
    s8, a8 = answer(tmp_path, "b", workers=8)
    advice_grid.record(tmp_path / "grid" / "unet3d-3000km-8gpu", s8, a8,
                       [(a8.recommended, v)], 600.0)
    doc = json.loads((tmp_path / "grid" / "unet3d-3000km-8gpu" / "advice.json").read_text())
    assert doc["recommended"]["changes"]["data_path"] == "cache"
    assert doc["confirmations"][0]["confirmed"] is True
    assert advice_grid.is_grid(tmp_path / "grid")
    lines = advice_grid.table(tmp_path / "grid")
    assert len(lines) == 4 and "model only" in lines[2] and "confirmed" in lines[3]
    assert "99.90 ± 0.10" in lines[3] and "data\\_path=cache" in lines[3]
    assert advice_grid.counts(tmp_path / "grid")["confirmed"] == 1
    assert cli.main(["report", str(tmp_path / "grid"), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "2 cells, 1 confirmed" in out and "10 min of wall time" in out


def test_the_provenance_names_every_day_the_cells_were_measured():
    envs = [{"started_utc": "2026-12-06T20:00:00+00:00"}, {"started_utc": "2026-12-05T09:00"},
            {"started_utc": "2026-12-05T10:00"}]
    assert advice_grid._dates(envs) == "2026-12-05 to 2026-12-06"
    assert advice_grid._dates(envs[1:]) == "2026-12-05"
    assert advice_grid._dates([{}]) == "date not recorded"


def test_the_provenance_names_the_host_profiles_cells_were_asked_under(tmp_path):
    """Each cell's profile is counted; a cell recorded before host profiles existed had
    end hosts that never bind, which is the `ideal` profile."""
    s, a = answer(tmp_path, "a")
    advice_grid.record(tmp_path / "grid" / "a", s, a, [], 1.0)
    advice_grid.record(tmp_path / "grid" / "b", s, a, [], 1.0)
    old = tmp_path / "grid" / "c" / advice_grid.RECORD
    advice_grid.record(old.parent, s, a, [], 1.0)
    doc = json.loads(old.read_text())
    del doc["scenario"]["host"]
    old.write_text(json.dumps(doc))
    assert advice_grid._hosts(tmp_path / "grid") == f"{s.host} (2 cells), ideal (1 cell)"
