"""A search that one probe cannot move, and a runner that measures again what the machine
took CPU from: driven by a fake measurement (AU as a function of distance, with the
interval, marks and steal a scenario gives), no kernel needed."""

import math

import pytest

from testbed.experiment.record import marks, record, reruns
from testbed.experiment.plan import plan as plan_mod
from testbed.experiment.run import runner as runner_mod
from testbed.experiment.run import search as search_mod
from testbed.experiment.measure.measure import Measured
from testbed.results import ResultStore

DEMO = """name = "s"
topology = "apn"
au_bar = 90
[fixed]
workers = 1
rate = "1gbit"
[search]
knob = "distance_km"
range = [0, 3000]
target = "au_pct >= 90"
tolerance = 125
{extra}
[dataset]
files = 8
file_kib = 1024
[workload]
batch = 1
compute_ms = 100
"""


def make_plan(tmp_path, extra=""):
    f = tmp_path / "s.toml"
    f.write_text(DEMO.format(extra=extra))
    return plan_mod.load(f)


class FakeRunner:
    """Writes one row per run: AU from `au(km, rep, attempt)` with a batch-means
    interval `ci`; `mark(km, rep, attempt)` names an emulator mark to put on it, or "".
    Counts every measurement, set-aside ones included."""

    def __init__(self, plan, store, au, ci=0.5, mark=lambda km, rep, attempt: ""):
        self.plan, self.store, self.au, self.ci, self.mark = plan, store, au, ci, mark
        self.measured: list[tuple[float, int]] = []

    def row(self, point, rep, attempt):
        km = point.value("distance_km")
        row = record.base_row(self.plan, point, rep, "w1", "gpu")
        why = self.mark(km, rep, attempt)
        row.update(au_pct=self.au(km, rep, attempt), au_ci_pct=self.ci, step_s=0.1,
                   step_ci_s=0.001, throughput_MB_s=10.0, limited_by="emulator" if why
                   else "latency", emulator_limited=bool(why), emulator_reason=why)
        return row

    def measure(self, point, rep, probe=False):
        attempt = sum(1 for m in self.measured if m == (point.value("distance_km"), rep))
        self.measured.append((point.value("distance_km"), rep))
        rows = [self.row(point, rep, attempt)]
        self.store.append_rows(rows)
        return rows


def search(tmp_path, au, extra="", **kw):
    plan = make_plan(tmp_path, extra)
    store = ResultStore(tmp_path / "out", record.columns(plan))
    fake = FakeRunner(plan, store, au, **kw)
    return search_mod.Search(plan, fake, store, {}).run(), fake


def falling(crossing_km, km_per_au=10.0):
    """AU 100 near 0 km falling 1 point per km_per_au through 90 at crossing_km."""
    return lambda km, rep, attempt: min(100.0, 90.0 - (km - crossing_km) / km_per_au)


def test_a_clear_curve_is_bisected_to_the_tolerance(tmp_path):
    result, fake = search(tmp_path, falling(1812.0))
    assert result["meets_up_to"] < 1812.0 < result["fails_from"]
    assert result["uncertainty"] <= 62.5 and result["undecided"] == ""
    assert result["runs"] == result["points"]  # every probe decided in its first run


def test_a_probe_within_its_interval_of_the_target_is_measured_until_it_decides(tmp_path):
    """A gentle slope (1 AU per 50 km): probes within about one rerun's spread of the
    target cannot tell from one run; more runs narrow the interval until they do, or
    leave them undecided with the crossing's ± covering them."""
    sd = reruns.rerun_sd("au_pct", "latency")
    assert sd > 0
    result, fake = search(tmp_path, falling(1825.0, 50.0))
    counts = {km: fake.measured.count((km, rep)) for km, rep in set(fake.measured)}
    probes = {km for km, _ in fake.measured}
    repeated = [km for km in probes if sum(1 for k, _ in fake.measured if k == km) > 1]
    assert repeated, counts
    assert all(abs(falling(1825.0, 50.0)(km, 0, 0) - 90.0) < 2 * 1.96 * sd
               for km in repeated)
    assert result["runs"] > result["points"]
    assert result["meets_up_to"] < 1825.0 < result["fails_from"]


def test_a_probe_on_the_target_is_left_undecided_and_widens_the_answer(tmp_path):
    """A probe reading exactly the target never decides: after max_runs runs it is
    named undecided with its evidence, the search probes beside it, and the crossing's ±
    spans the decided probes around it."""
    au = lambda km, rep, attempt: 90.0 if km == 1500.0 else (95.0 if km < 1500 else 80.0)
    result, fake = search(tmp_path, au, extra="max_runs = 3")
    assert "1500: 90.0 ± " in result["undecided"] and "over 3 runs" in result["undecided"]
    assert sum(1 for km, _ in fake.measured if km == 1500.0) == 3
    assert result["meets_up_to"] < 1500.0 < result["fails_from"]
    assert result["uncertainty"] == (result["fails_from"] - result["meets_up_to"]) / 2


def test_a_marked_probe_is_neither_side_of_the_bracket(tmp_path):
    """The emulator marks every run at 1,500 km (the machine took its CPU there): the
    search does not walk past it as if the fibre failed the bar; it says it could not
    decide there and brackets the crossing with the probes beside it."""
    au = falling(1812.0)
    mark = lambda km, rep, attempt: "steal" if km == 1500.0 else ""
    low = lambda km, rep, attempt: 70.0 if km == 1500.0 else au(km, rep, attempt)
    result, _ = search(tmp_path, low, mark=mark)
    assert "1500: " in result["undecided"] and "emulator (steal)" in result["undecided"]
    assert result["meets_up_to"] < 1812.0 < result["fails_from"]
    assert 1500.0 not in (result["meets_up_to"], result["fails_from"])


def test_interval_covers_reruns_and_trusts_three_runs_spread_when_wider():
    assert search_mod.interval([90.0], [0.0], 1.0) == pytest.approx(1.96)
    assert search_mod.interval([90.0, 90.0], [0.0, 0.0], 1.0) == pytest.approx(1.96 / 2 ** .5)
    wide = search_mod.interval([85.0, 90.0, 95.0], [0.1] * 3, 0.1)
    assert wide == pytest.approx(4.303 * 5.0 / 3 ** .5)
    assert math.isnan(search_mod.interval([], [], 1.0))


def test_single_run_intervals_are_widened_by_the_rerun_spread():
    sd = reruns.rerun_sd("au_pct", "latency")
    assert reruns.widened(1.0, "au_pct", "latency") == pytest.approx(math.hypot(1.0, 1.96 * sd))
    assert reruns.widened(1.0, "samples_per_s", "latency") == 1.0  # not measured: as it was
    assert reruns.rerun_sd("au_pct", "unmeasured kind") == max(reruns.RERUN_SD["au_pct"].values())


class AttemptRunner(runner_mod.Runner):
    """A runner whose measurements come from a script: attempt n -> (steal %, AU)."""

    def __init__(self, plan, store, script):
        super().__init__(plan, store)
        self.script, self.attempts = script, 0

    def _attempt(self, point, rep):
        steal, au = self.script[min(self.attempts, len(self.script) - 1)]
        self.attempts += 1
        row = record.base_row(self.plan, point, rep, "w1", "gpu")
        row.update(au_pct=au, throughput_MB_s=au, host_steal_pct=steal, host_wait_pct=1.0,
                   emulator_limited=False, emulator_reason="", limited_by="latency")
        rows = [row]
        marks.host_mark_rows(rows)
        return Measured(rows, [(point.run_id(rep), "w1", 0, "0", "0", "0.1", 1, 1, True)])


@pytest.fixture
def quiet(monkeypatch):
    """The machine is quiet whenever the runner looks (no 5 s meter window)."""
    monkeypatch.setattr(runner_mod, "machine_taken", lambda window_s=0.0: [])


def run_once(tmp_path, script, probe=False):
    plan = plan_mod.load(tmp_path / "s.toml") if (tmp_path / "s.toml").exists() \
        else make_plan(tmp_path)
    from testbed.experiment.resolve import resolve
    plan = resolve.nominal(plan)
    store = ResultStore(tmp_path / "out", record.columns(plan))
    r = AttemptRunner(plan, store, script)
    rows = r.measure(plan.points[0], 0, probe=probe)
    return r, rows, store


def test_a_run_under_steal_is_set_aside_and_measured_again(tmp_path, quiet):
    r, rows, store = run_once(tmp_path, [(14.2, 85.1), (0.2, 97.4)])
    assert r.attempts == 2 and rows[0]["au_pct"] == 97.4
    assert rows[0]["emulator_limited"] is False and rows[0]["remeasured"] == 1
    assert "emulator (steal): steal 14.2 %" in rows[0]["remeasured_why"]
    assert "AU 85.1 %" in rows[0]["remeasured_why"]
    written = store.frame()
    assert len(written) == 1 and written["au_pct"].iloc[0] == 97.4
    steps = (store.out / "steps.csv").read_text().splitlines()
    assert len(steps) == 2  # the header and the kept measurement's step only


def test_a_run_still_under_steal_is_written_marked_after_the_last_try(tmp_path, quiet):
    r, rows, _ = run_once(tmp_path, [(20.0, 80.0)])
    assert r.attempts == 1 + runner_mod.MAX_REMEASURE
    assert rows[0]["emulator_reason"] == "steal" and rows[0]["limited_by"] == "emulator"
    assert rows[0]["remeasured"] == runner_mod.MAX_REMEASURE


def test_steal_below_the_threshold_keeps_the_first_measurement(tmp_path, quiet):
    r, rows, _ = run_once(tmp_path, [(marks.STEAL_PCT - 0.5, 95.0), (0.0, 99.0)])
    assert r.attempts == 1 and rows[0]["remeasured"] == 0 and rows[0]["au_pct"] == 95.0


def test_a_machine_that_stays_short_keeps_the_mark_and_stops_waiting(tmp_path, monkeypatch):
    """Re-measuring waits for the machine to give the CPU back; when it does not within
    QUIET_WAIT_S the run is kept as marked, and the next marked runs do not wait."""
    looks = []
    monkeypatch.setattr(runner_mod, "machine_taken",
                        lambda window_s=0.0: looks.append(1) or ["steal"])
    monkeypatch.setattr(runner_mod, "QUIET_WAIT_S", 0.05)
    r, rows, _ = run_once(tmp_path, [(20.0, 80.0)])
    assert r.attempts == 1 and rows[0]["remeasured"] == 0
    assert rows[0]["emulator_reason"] == "steal" and looks
    seen = len(looks)
    r.measure(r.plan.points[0], 1)
    assert len(looks) == seen  # within QUIET_SKIP_S: not waited for again


def test_marks_name_each_way_the_machine_took_cpu():
    row = lambda **kw: {"status": "ok", "emulator_limited": False, "emulator_reason": "",
                        "limited_by": "latency", **kw}
    rows = [row(host_steal_pct=marks.STEAL_PCT), row(host_wait_pct=marks.HOST_WAIT_PCT),
            row(host_steal_pct=marks.STEAL_PCT, host_wait_pct=marks.HOST_WAIT_PCT),
            row(host_steal_pct=math.nan, host_wait_pct="")]
    assert marks.host_mark_rows(rows)
    assert [r["emulator_reason"] for r in rows] == ["steal", "host", "host+steal", ""]
    assert marks.remeasure(rows[:1]) == ["steal"]
    shortfall = [row(emulator_limited=True, emulator_reason="shortfall")]
    assert marks.remeasure(shortfall) == [] and marks.remeasure(shortfall, probe=True) == \
        ["shortfall"]
    assert marks.remeasure([row(emulator_limited=True, emulator_reason="tcg")], probe=True) == []
    event = {"rows": [row()], "host_wait_pct": 1.0, "host_steal_pct": 25.0}
    assert marks.host_mark(event) and event["rows"][0]["emulator_reason"] == "steal"
