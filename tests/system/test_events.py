"""Fibre events under a running point, in a real kernel (netem, nfsd, the NFS client):
each event kind applied live to the running qdiscs and read back, and what a mount does
when the span goes down for longer than its RPC timeout, as a user would choose it:

  hard  the reads stall through the outage and resume: the point is measured, its
        steps show the stall, TCP counted its RTOs and NFS its major timeouts
  soft  (NFSv3, small timeo and retrans) the reads fail: the point fails, its reason
        names the event in one line, and no short read was counted as a sample. (An
        NFSv4 mount over TCP waits for a reply while its connection can be re-made,
        soft or not: the kernel's RPC_TASK_NO_RETRANS_TIMEOUT, "wait forever for a
        reply"; a 6 s outage did not fail a v4.2 soft mount here)

Each runs `testbed run` as a user does, on a 100 Mbit/s span (0 km: the kernel's own
200 ms minimum RTO, not the fibre, sets TCP's backoff) with small files and short
windows, so that a run takes well under a minute in user-mode Linux."""

import subprocess
import sys

import pandas as pd
import pytest

pytestmark = [pytest.mark.system, pytest.mark.runner]

OUTAGE_S = 6.0  # longer than the mounts' RPC timeout: timeo 1 s, retrans 1 (~3 s)
COMMON = """
[dataset]
files = 16
file_kib = 1024
[workload]
batch = 2
compute_ms = 50
measure_s = 2
measure_max_s = 4
warmup_max_s = 2
min_steps = 4
readers = 2
"""
MOUNTS = f"""
name = "mount-semantics"
[fixed]
workers = 1
rate = "100mbit"
event = "down"
event_at_s = 1
event_duration_s = {OUTAGE_S}
event_tail_s = 3
[sweep]
mount = ["hard", "soft", "soft4"]
[mounts.hard]
hard = true
timeo_ds = 10
retrans = 1
[mounts.soft]
vers = "3"
hard = false
timeo_ds = 10
retrans = 1
[mounts.soft4]
hard = false
timeo_ds = 10
retrans = 1
[server]
versions = ["3", "4.2"]
""" + COMMON
KINDS = """
name = "event-kinds"
[fixed]
workers = 1
rate = "100mbit"
distance_km = 100
event_at_s = 0.5
event_duration_s = 1
event_tail_s = 1
event_extra_km = 1000
event_loss_pct = 5
event_rate = "20mbit"
[sweep]
event = ["reroute", "loss", "rate", "down"]
""" + COMMON


def _run(tmp_path, name, text):
    """`testbed run` of an experiment file: (exit code, stderr, results.csv rows)."""
    f = tmp_path / f"{name}.toml"
    f.write_text(text)
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(f), "--out",
                           str(out)], capture_output=True, text=True, timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, proc.stderr, pd.read_csv(out / "results.csv"), out


@pytest.fixture(scope="module")
def mounts_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("events"), "mounts", MOUNTS)


def test_hard_mount_stalls_through_an_outage_and_resumes(real_kernel, mounts_run):
    """The span is down 6 s, longer than the RPC timeout: the hard mount's reads wait
    and resume, the point is measured, its steps show the stall (at least half the
    outage lost: the loader's queue holds 0.1 s), and it recovered before the end."""
    code, err, df, out = mounts_run
    hard = df[(df["mount"] == "hard") & (df["event"] == "down")].iloc[0]
    assert hard["status"] == "ok", hard["reason"]
    assert bool(hard["event_readback_ok"]) and hard["event_changes"] == 4
    assert hard["event_extra_s"] >= 0.5 * OUTAGE_S, hard["event_extra_s"]
    assert bool(hard["event_recovered"])
    assert hard["tcp_rto_timeouts"] >= 1
    assert hard["nfs_major_timeouts"] >= 1  # "server not responding, still trying"
    assert hard["event_limited_by"] in ("queue_drained", "rto_backoff", "slow_start")
    steps = pd.read_csv(out / "steps.csv")
    ours = steps[steps["point"].str.startswith(hard["point"].rsplit("|rep=", 1)[0])]
    assert ours["wait_s"].max() >= 0.5 * OUTAGE_S  # one step waited out the outage


def test_soft_mount_fails_the_point_naming_the_event(real_kernel, mounts_run):
    """The soft mount's reads fail after timeo x retrans: the point fails (the run
    exits 1), its reason is one line naming the event, and nothing was measured."""
    code, err, df, _ = mounts_run
    soft = df[(df["mount"] == "soft") & (df["event"] == "down")].iloc[0]
    assert code == 1, err[-2000:]
    assert soft["status"] == "failed"
    reason = str(soft["reason"])
    assert "\n" not in reason and f"fibre event: down {OUTAGE_S:g} s at 1 s" in reason, reason
    assert soft["au_pct"] != soft["au_pct"]  # NaN: no figure for a failed point


def test_nfsv4_soft_mount_waits_out_an_outage_like_a_hard_one(real_kernel, mounts_run):
    """An NFSv4.2 soft mount, the same timeo and retrans: its requests on TCP are not
    timed out while the connection can be re-made (RPC_TASK_NO_RETRANS_TIMEOUT), so it
    stalls and resumes as the hard mount does: the point is measured."""
    _, _, df, _ = mounts_run
    soft4 = df[(df["mount"] == "soft4") & (df["event"] == "down")].iloc[0]
    assert soft4["status"] == "ok", soft4["reason"]
    assert soft4["event_extra_s"] >= 0.5 * OUTAGE_S and bool(soft4["event_recovered"])


def test_every_event_kind_is_applied_live_and_read_back(real_kernel, tmp_path):
    """A reroute (+1,000 km), a loss burst (5 %), a rate change (20 Mbit/s) and a span
    down, each 1 s into a 100 km span's measured window: each is put on both directions
    of the running span and taken off again (4 changes, each read back as asked), no
    earlier than planned, and every point is measured."""
    code, err, df, _ = _run(tmp_path, "kinds", KINDS)
    assert code == 0, err[-3000:]
    assert sorted(df["event"]) == ["down", "loss", "none", "rate", "reroute"]  # + baseline
    for _, row in df[df["event"] != "none"].iterrows():
        assert row["status"] == "ok", row["reason"]
        assert bool(row["event_readback_ok"]) and row["event_changes"] == 4, row["event"]
        assert row["event_applied_s"] >= 0.5 and row["event_restored_s"] >= 1.5
    down = df[df["event"] == "down"].iloc[0]
    assert down["tcp_rto_timeouts"] >= 1 and down["event_extra_s"] > 0
