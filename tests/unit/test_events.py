"""Fibre events within a point: the knobs and their rules (spec.EventSpec, plan), the
player's schedule on a running network (network.fibre_events, with netlink faked), what
an event cost a loader (workload.recovery) and the outage model (model.outage)."""

import math
import subprocess
import sys
import threading
from contextlib import contextmanager

import pytest

from testbed import kernel
from testbed.errors import SpecError
from testbed.experiment.plan import plan as plan_mod
from testbed.model import outage
from testbed.network import fibre_events, tc
from testbed.spec import EventSpec, FibreSpec
from testbed.workload import Step, recovery

EXPERIMENT = "experiments/data-paths.toml"


# --- knobs and rules ------------------------------------------------------------------------
@pytest.mark.parametrize("fields,needle", [
    ({"kind": "reroute"}, "event_extra_km or event_extra_delay_ms"),
    ({"kind": "loss"}, "event_loss_pct > 0"),
    ({"kind": "rate"}, "event_rate"),
    ({"kind": "down", "count": 3}, "repeating event needs both"),
    ({"kind": "down", "every_s": 5.0}, "repeating event needs both"),
    ({"kind": "down", "count": 2, "every_s": 1.0, "duration_s": 1.0}, "overlap"),
    ({"kind": "down", "at_s": -1.0}, "event_at_s"),
    ({"kind": "down", "duration_s": 0.0}, "event_duration_s"),
    ({"kind": "cut"}, "event"),
    ({"kind": "loss", "loss_pct": 101.0}, "event_loss_pct"),
])
def test_event_rules_name_the_knob(fields, needle):
    with pytest.raises(SpecError, match=needle):
        EventSpec(**fields)


def test_event_times_follow_time_dilation():
    e = EventSpec(kind="down", at_s=2.0, duration_s=0.5, every_s=10.0, count=3,
                  tail_s=4.0, time_scale=10.0)
    assert e.times() == [(2.0, 2.5), (12.0, 12.5), (22.0, 22.5)]
    assert e.real_times() == [(20.0, 25.0), (120.0, 125.0), (220.0, 225.0)]
    assert e.window_s() == pytest.approx(26.5)
    assert EventSpec().times() == [] and EventSpec().window_s() == 0.0
    assert "x3 every 10 s" in e.describe()


def test_event_directions():
    both, fwd = EventSpec(kind="down"), EventSpec(kind="down", direction="to_workers")
    assert both.takes(True) and both.takes(False)
    assert fwd.takes(True) and not fwd.takes(False)
    assert EventSpec(kind="down", direction="to_storage").takes(False)
    assert not EventSpec().takes(True)


def test_what_each_kind_gives_tc():
    f = FibreSpec(distance_km=3000, rate_mbit=1000, loss_pct=0.01, time_scale=4.0)
    normal = f.direction(True)
    down = EventSpec(kind="down").during(f, True)
    assert down.loss_pct == 100.0 and down.delay_ms == normal.delay_ms
    burst = EventSpec(kind="loss", loss_pct=5.0).during(f, True)
    assert burst.loss_pct == 5.0 and burst.rate_mbit == normal.rate_mbit
    longer = EventSpec(kind="reroute", extra_km=500).during(f, False)
    assert longer.delay_ms == pytest.approx(f.replace(distance_km=3500).direction(False)
                                            .delay_ms)
    assert longer.limit_pkts >= normal.limit_pkts  # the queue follows the longer BDP
    slow = EventSpec(kind="rate", rate_mbit=100.0).during(f, False)
    assert slow.rate_mbit == pytest.approx(100.0 / 4.0)


def test_plan_takes_event_knobs_and_holds_the_window():
    plan = plan_mod.load(EXPERIMENT, {"event": "down", "event_duration_s": "10",
                                      "event_at_s": "3", "event_tail_s": "6"})
    played = [p for p in plan.points if not p.is_baseline]
    assert len(played) == 6
    for p in played:
        assert p.event.kind == "down" and p.event.duration_s == 10.0
        assert p.workload.measure_s >= 19.0 and p.workload.measure_max_s >= 19.0
        assert p.value("event") == "down"
        base = plan.baseline_of(p)  # the co-located baseline: a perfect fibre at 0 km
        assert base is not None and not base.event.active
        assert base.workload.measure_s < 19.0
    plain = plan_mod.load(EXPERIMENT)
    assert all(not p.event.active for p in plain.points)


def test_sweeping_events(tmp_path):
    f = tmp_path / "ev.toml"
    f.write_text('name = "ev"\ntopology = "apn"\n[fixed]\nevent_extra_km = 500\n'
                 '[sweep]\nevent = ["down", "reroute"]\n'
                 'event_duration_s = [0.05, 1, 10]\n')
    plan = plan_mod.load(f)
    kinds = {(p.event.kind, p.event.duration_s) for p in plan.points if not p.is_baseline}
    assert ("reroute", 10.0) in kinds and ("down", 0.05) in kinds and len(kinds) == 6
    assert len(plan.points) == 7  # and one baseline: no event


@pytest.mark.parametrize("value,needle", [
    ("event=dwn", "did you mean"), ("event_at_s=-2", "event_at_s"),
    ("event=loss", "event_loss_pct"), ("event_rate=fast", "event_rate"),
    ("event_direction=up", "event_direction"),
])
def test_bad_event_is_one_line_exit_2_nothing_created(tmp_path, value, needle):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", EXPERIMENT, "--check",
                           "--out", str(out), "-p", value], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()


# --- the player -----------------------------------------------------------------------------
class FakeNet:
    """One span "wan" from srv (a) to s1 (b)."""

    def fibre_ends(self, name):
        return [("ns-srv", "srv-eth0", True), ("ns-s1", "s1-eth0", False)]


class FakeIpr:
    def link_lookup(self, ifname):
        return [1]


@pytest.fixture
def fake_tc(monkeypatch):
    """tc.change records what each device is given; tc.read reads it back."""
    given = {}
    lock = threading.Lock()

    def change(ipr, index, ifname, d):
        with lock:
            given.setdefault(ifname, []).append(d)

    def read(ipr, index, ifname):
        d = given[ifname][-1]
        return tc.Readback(d.delay_ms, d.jitter_ms, d.loss_pct, d.rate_mbit, d.limit_pkts,
                           0, 0, 0, 0)

    @contextmanager
    def ipr(ns):
        yield FakeIpr()

    monkeypatch.setattr(fibre_events.tc, "change", change)
    monkeypatch.setattr(fibre_events.tc, "read", read)
    monkeypatch.setattr(fibre_events, "ns_iproute", ipr)
    return given


def test_player_plays_each_event_and_puts_the_span_back(fake_tc):
    spec = FibreSpec(distance_km=100, rate_mbit=1000)
    event = EventSpec(kind="down", at_s=0.0, duration_s=0.01, every_s=0.03, count=2,
                      direction="to_workers")
    with fibre_events.EventPlayer(FakeNet(), event, {"wan": spec}, {"wan": True}) as p:
        p.begin(fibre_events.time.perf_counter())
        p._thread.join(10)
    assert p.error is None
    assert [(a.state, a.occurrence) for a in p.applied] == \
        [("event", 0), ("restored", 0), ("event", 1), ("restored", 1)]
    assert set(fake_tc) == {"srv-eth0"}  # to_workers only: srv -> s1
    assert [d.loss_pct for d in fake_tc["srv-eth0"]] == [100.0, 0.0, 100.0, 0.0]
    assert all(a.matches and a.applied_s >= a.planned_s for a in p.applied)
    s = p.summary(1.0)
    assert s["event_changes"] == 4 and s["event_readback_ok"] is True


def test_player_stopped_early_puts_the_span_back(fake_tc):
    spec = FibreSpec(distance_km=100, rate_mbit=1000)
    event = EventSpec(kind="loss", loss_pct=20.0, at_s=0.0, duration_s=3600.0)
    with fibre_events.EventPlayer(FakeNet(), event, {"wan": spec}, {"wan": True}) as p:
        p.begin(fibre_events.time.perf_counter())
        while not p.applied:
            p._stop.wait(0.01)
    assert [a.state for a in p.applied] == ["event", "event", "restored", "restored"]
    assert fake_tc["srv-eth0"][-1].loss_pct == 0.0 and fake_tc["s1-eth0"][-1].loss_pct == 0.0


def test_drops_during_an_event_are_the_events_own():
    """The netem drops between an event's start and its restore, per span direction: a
    span down drops what is sent meanwhile, which must not mark the point as a queue
    overflow (measure._explained leaves them out of the emulator's evidence)."""
    p = fibre_events.EventPlayer.__new__(fibre_events.EventPlayer)
    a = lambda state, occ, drops, fwd=True: fibre_events.Applied(  # noqa: E731
        "wan", fwd, occ, state, 0.0, 0.0, 100.0, 1.0, 1000.0, True, drops)
    p.applied = [a("event", 0, 5), a("event", 0, 0, False), a("restored", 0, 905),
                 a("restored", 0, 40, False), a("event", 1, 910), a("restored", -1, 1010)]
    assert p.drops_during("wan", True) == 1000 and p.drops_during("wan", False) == 40
    assert p.drops_during("other", True) == 0


def test_player_never_begun_changes_nothing(fake_tc):
    event = EventSpec(kind="down")
    with fibre_events.EventPlayer(FakeNet(), event, {"wan": FibreSpec()}, {"wan": True}) as p:
        pass
    assert p.applied == [] and fake_tc == {}


# --- what an event cost a loader ------------------------------------------------------------
def run_of(durations, compute=1.0):
    """Back-to-back steps: each waits its duration - compute, then computes."""
    out, t = [], 0.0
    for i, d in enumerate(durations):
        out.append(Step(i, t, d - compute, compute, 1000, 1))
        t += d
    return out


def test_cost_of_a_stall_and_its_recovery():
    # 10 steps at 1 s, the event at 10-13 s: one step waits 4 s, two run 1.5 s, then 1 s
    steps = run_of([1.0] * 10 + [5.0, 1.5, 1.5] + [1.0] * 10)
    c = recovery.cost(steps, window_start=2.0, events=[(10.0, 13.0)])
    assert c["event_au_pre_pct"] == pytest.approx(100.0)
    assert c["event_au_min_pct"] == pytest.approx(20.0)
    assert c["event_extra_s"] == pytest.approx(5.0)     # 4 + 0.5 + 0.5
    assert c["event_recover_s"] == pytest.approx(5.0)   # back at pace at 18 s
    assert c["event_extra_over_duration"] == pytest.approx(5.0 / 3.0)
    assert c["event_recovered"] is True


def test_cost_in_emulated_seconds_and_when_hidden():
    steps = run_of([2.0] * 20)
    c = recovery.cost(steps, 0.0, [(10.0, 11.0)], time_scale=2.0)
    assert c["event_extra_s"] == pytest.approx(0.0) and c["event_recover_s"] == 0.0
    assert math.isnan(recovery.cost(steps, 0.0, [])["event_extra_s"])


def test_cost_when_the_window_ends_before_recovery():
    steps = run_of([1.0] * 10 + [9.0])
    c = recovery.cost(steps, 0.0, [(10.0, 15.0)])
    assert c["event_recovered"] is False and math.isnan(c["event_recover_s"])


# --- the outage model -----------------------------------------------------------------------
def job(**kw):
    base = dict(rtt_s=0.0294, time_scale=1.0, compute_s=0.5, prefetch=2, au_pct=80.0,
                read_Bps=1e9, connections=4, mss_bytes=1448)
    return outage.Job(**{**base, **kw})


def test_rto_backoff_doubles_until_the_outage_is_over():
    rtt = 0.03
    rto = rtt + kernel.TCP_RTO_MIN_S
    assert outage.resume_s(0.1, rtt) == pytest.approx(rto + rtt)
    assert outage.resume_s(rto + 0.01, rtt) == pytest.approx(3 * rto + rtt)
    assert outage.resume_s(10.0, rtt) == pytest.approx(63 * rto + rtt)  # 1+2+..+32 RTOs


def test_outage_cost_grows_with_the_outage_and_names_its_cause():
    costs = [outage.predict(d, job()) for d in (0.05, 1.0, 10.0)]
    assert costs[0].extra_s < costs[1].extra_s < costs[2].extra_s
    assert all(c.extra_s >= d for c, d in zip(costs, (0.05, 1.0, 10.0)))
    assert costs[2].limited_by == "queue_drained"
    assert costs[0].limited_by in ("rto_backoff", "slow_start")


def test_a_full_queue_hides_a_short_outage_and_local_data_all():
    fed = job(au_pct=100.0, prefetch=16, compute_s=0.5)    # 8 s of work queued
    assert outage.predict(0.05, fed).limited_by == "hidden"
    assert outage.predict(0.05, fed).extra_s == 0.0
    assert outage.predict(10.0, fed).extra_s > 0.0
    assert outage.predict(10.0, job(data="local")).limited_by == "local"
    meta = outage.predict(1.0, job(data="metadata"))
    assert meta.ramp_s == 0.0 and meta.limited_by in ("queue_drained", "rto_backoff")


def test_outage_model_reports_emulated_seconds():
    slow = outage.predict(1.0, job(time_scale=10.0))
    assert slow.queue_s == 0.0 and slow.extra_s >= 1.0
    # the kernel's 200 ms minimum RTO does not dilate: at k = 10 it is 20 ms emulated
    assert slow.resume_wait_s < outage.predict(1.0, job()).resume_wait_s


def test_a_short_read_is_never_counted_as_a_sample(tmp_path):
    from testbed.workload.loader import read_sample
    f = tmp_path / "sample_000000.bin"
    f.write_bytes(b"x" * 5000)
    assert read_sample((str(f), 0, -1), read_bytes=1024) == 5000
    assert read_sample((str(f), 1000, 2000), read_bytes=1024) == 2000
    with pytest.raises(OSError, match="short read"):
        read_sample((str(f), 4000, 2000), read_bytes=1024)


def test_the_event_timeline_figure(tmp_path):
    import pandas as pd
    from testbed.experiment.report import event_plot
    from testbed import plots
    durations = [1.0] * 10 + [5.0, 1.5] + [1.0] * 8
    steps = run_of(durations)
    df = pd.DataFrame([("p|rep=0", "w1", s.index, s.start_s, s.wait_s, s.compute_s,
                        s.bytes, s.samples, s.index >= 3) for s in steps],
                      columns=["point", "worker", "step", "start_s", "wait_s", "compute_s",
                               "bytes", "samples", "measured"])
    row = pd.Series({"point": "p|rep=0", "worker": "w1", "time_scale_k": 2.0,
                     "event_applied_s": 3.5, "event_duration_s": 1.5})
    line = event_plot._timeline(row, df, "p")
    assert line is not None and line.t_s[0] >= -event_plot.BEFORE_S
    assert min(line.au_pct) == pytest.approx(20.0) and line.label == "p"
    png = plots.timelines([line], tmp_path / "t.png", title="t", au_bar=90)
    assert png.exists() and png.stat().st_size > 0


def test_a_crowded_event_figure_draws_the_costliest_of_each_event():
    """Past MAX_LINES points, one line per event kind and duration (its costliest
    point), labelled by what differs between the lines drawn."""
    import pandas as pd
    from testbed.experiment.report import event_plot
    rows = [{"point": f"data_path={d}|prefetch={p}|event=down|event_duration_s={t}|km=3000|rep=0",
             "event": "down", "event_duration_s": t,
             "event_extra_s": {"direct": 2.0, "cache": 0.0}[d] + p / 10}
            for d in ("direct", "cache") for p in (2, 8) for t in (0.05, 1, 10)]
    chosen, note = event_plot._chosen(pd.DataFrame(rows))
    assert len(chosen) == 3 and set(chosen["event_extra_s"]) == {2.8} and note
    labels = event_plot._labels(chosen["point"])
    assert sorted(labels.values()) == ["event_duration_s=0.05", "event_duration_s=1",
                                       "event_duration_s=10"]
