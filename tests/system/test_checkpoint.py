"""A checkpoint written by two ranks (one per GPU worker) to kernel nfsd across the
emulated fibre, fsync'd, dropped from the clients' caches and read back byte for byte,
at 0 km and at 1,000 km; every figure at or above the least time the fibre allows: the
bytes at its rate, plus the round trips each file cannot overlap."""

import shutil
import time
from pathlib import Path

import pytest

from testbed import topology
from testbed.services.nfs import NfsMount, NfsServer
from testbed.spec import MountSpec
from testbed.workload import checkpoint as ck
from testbed.workload import checkpoint_size as cs
from testbed.workload import presets

RATE_MBIT = 200
RANK_BYTES = 32 << 20  # 64 MiB over two ranks
ALONE_BYTES = 8 << 20  # one rank alone on the fibre: its round trips are not hidden
ALONE_CHECKPOINTS = 3
# Each rank writes a 405B pipeline rank's files (5 layers + its optimizer state) scaled
# down: six files, each paying its own round trips.
LAYOUT = cs.rank_checkpoint(cs.load(Path(presets.MLPERF_DIR) / "llama3_405b.yaml"),
                            512, 0).files
# Round trips of a written file that nothing can overlap: OPEN before its first WRITE,
# and after its last byte left, the COMMIT of fsync (or the last stable WRITE's reply).
# A file read back: at least its first READ (OPEN may be answered by a delegation).
WRITE_RTTS, READ_RTTS = 2, 1
BURST_BYTES = 128 << 10  # htb's bucket (one GSO packet + an MTU) may pass above the rate


def layouts(ranks: int, size: int) -> tuple[tuple[cs.ShardFile, ...], ...]:
    """Rank r's six files, named as DLIO names model-parallel rank r's."""
    return tuple(tuple(cs.ShardFile(f.name.replace("model_0", f"model_{r}")
                                    .replace("mp_rank_0", f"mp_rank_{r}"), f.nbytes)
                       for f in cs.scaled(LAYOUT, size)) for r in range(ranks))


def floor_s(rtt_s: float, rank_bytes: int, ranks: int, rtts_per_file: int) -> float:
    """The least time the slowest of `ranks` ranks can take, each moving rank_bytes in
    len(LAYOUT) files over the one fibre: all bytes at its rate, and no rank faster
    than its own bytes plus its files' round trips."""
    def at_rate(nbytes: int) -> float:
        return max(0, nbytes - BURST_BYTES) * 8 / (RATE_MBIT * 1e6)
    return max(at_rate(ranks * rank_bytes),
               at_rate(rank_bytes) + len(LAYOUT) * rtts_per_file * rtt_s)


def checkpoint_at(make_net, tmp_path, km: int):
    """At km: two ranks write and read back one checkpoint, then one rank alone writes
    ALONE_CHECKPOINTS. Returns (both, alone, rtt_s, seconds of the two runs)."""
    export = tmp_path / f"export-{km}"
    export.mkdir()
    net = make_net("apn", workers=2, distance_km=km, rate=f"{RATE_MBIT}mbit")
    server = net.enter(NfsServer(net, "srv", export, writable=True))
    mounts = [net.enter(NfsMount(net, w, server, MountSpec(read_ahead_kb=16384)))
              for w in ("w1", "w2")]
    plan = ck.CheckpointPlan(layouts(2, RANK_BYTES), seed=km, transfer_size=1 << 20)
    t0 = time.monotonic()
    both = ck.run_checkpoints([m.path / "ckpt" for m in mounts], plan, "thread")
    alone = ck.run_checkpoints(mounts[0].path / "alone", ck.CheckpointPlan(
        layouts(1, ALONE_BYTES), num_write=ALONE_CHECKPOINTS, num_read=0))
    took = time.monotonic() - t0
    assert both.error is None and alone.error is None, (both.error, alone.error)
    # What nfsd holds is what the ranks wrote, byte for byte.
    for rank, lay in enumerate(plan.layouts):
        on_server = ck.read_back(export / "ckpt", *plan.args(rank), files=lay)
        assert on_server.problem is None and on_server.nbytes == RANK_BYTES
    rtt_s = topology.path_fibres(net.topo, "w1")[0][1].rtt_ms / 1000.0
    net.stop()
    shutil.rmtree(export)  # the lab kernel's /tmp is its RAM
    return both, alone, rtt_s, took


def test_checkpoint_written_and_read_back_over_nfs_at_0_and_1000_km(make_net, tmp_path):
    runs = {km: checkpoint_at(make_net, tmp_path, km) for km in (0, 1000)}
    assert runs[0][2] == 0 and runs[1000][2] == pytest.approx(0.0098, abs=0.0002)
    files, lines = len(LAYOUT), []
    for km, (both, alone, rtt, took) in runs.items():
        assert [(r.phase, r.rank, r.ok, r.nbytes) for r in both.results] == [
            (p, k, True, RANK_BYTES) for p in ("write", "read") for k in (0, 1)]
        s = ck.summarise(both, 0.0)
        assert s["write_duration_s"] >= floor_s(rtt, RANK_BYTES, 2, WRITE_RTTS), s
        assert s["read_duration_s"] >= floor_s(rtt, RANK_BYTES, 2, READ_RTTS), s
        # fsync waits for each file's COMMIT (or last stable WRITE) reply
        assert all(r.fsync_s >= files * rtt for r in both.results if r.phase == "write")
        # Alone, a rank's round trips add to its bytes' time: at 1,000 km every write
        # takes at least the 0 km floor plus the round trips the model counts.
        times = [r.seconds for r in alone.results]
        assert len(times) == ALONE_CHECKPOINTS and all(r.ok for r in alone.results)
        assert min(times) >= floor_s(rtt, ALONE_BYTES, 1, WRITE_RTTS), times
        lines.append(f"{km:,} km: 2 ranks write {s['write_duration_s']:.3f} s, read "
                     f"{s['read_duration_s']:.3f} s (floors {floor_s(rtt, RANK_BYTES, 2, 2):.3f},"
                     f" {floor_s(rtt, RANK_BYTES, 2, 1):.3f}); 1 rank alone "
                     f"{', '.join(f'{t:.3f}' for t in times)} s (floor "
                     f"{floor_s(rtt, ALONE_BYTES, 1, WRITE_RTTS):.3f}); run {took:.1f} s")
    extra = min(r.seconds for r in runs[1000][1].results[1:]) - \
        min(r.seconds for r in runs[0][1].results[1:])
    print("\n" + "\n".join(lines) + f"\nalone, fastest after the first: 1,000 km "
          f"{extra * 1000:.0f} ms slower; the model's round trips: "
          f"{files * WRITE_RTTS * runs[1000][2] * 1000:.0f} ms")
