"""Checkpoints as DLIO sizes, names, writes and reads them: the four MLPerf Storage v2.0
llama3 configs sized exactly as DLIO's formula does (and set against MLPerf's published
totals), a write read back byte for byte, corruption and short files caught with one
line, an I/O error that cuts a write off never counted as written."""

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.errors import SpecError, WorkloadError
from testbed.workload import checkpoint as ck
from testbed.workload import checkpoint_size as cs
from testbed.workload import presets

MLPERF = Path(presets.MLPERF_DIR)
GIB = 1 << 30

# Ranks MLPerf Storage v2.0 runs each model on in CLOSED (Submission_guidelines.md 2.2.1:
# "The number of MPI processes must be set to 8, 64, 512, and 1024"; mlpstorage/config.py
# LLM_ALLOWED_VALUES says the same), and its published checkpoint sizes (Table 2).
RANKS = {"llama3_8b": 8, "llama3_70b": 64, "llama3_405b": 512, "llama3_1t": 1024}
PUBLISHED = {"llama3_8b": "105 GB", "llama3_70b": "912 GB", "llama3_405b": "5.29 TB",
             "llama3_1t": "18 TB"}

# What DLIO's formula gives (bytes): parameters; model and optimizer state summed over
# the ranks; rank 0's model and optimizer state and its file count; every distinct
# per-rank (model, optimizer) pair.
DLIO = {
    "llama3_8b": dict(params=8_030_261_248, model=16_060_522_496, optimizer=96_365_101_056,
                      rank0=(2_007_565_312, 12_045_637_632, 2),
                      shares={(2_007_565_312, 12_045_637_632)}),
    "llama3_70b": dict(params=69_882_617_856, model=139_783_700_480,
                       optimizer=838_622_871_552, rank0=(2_184_120_320, 13_103_482_368, 2),
                       shares={(2_184_120_320, 13_103_482_368)}),
    "llama3_405b": dict(params=405_853_388_800, model=811_764_809_728,
                        optimizer=4_870_743_982_080, rank0=(3_713_269_760, 9_513_171_840, 6),
                        shares={(0, 9_513_171_840), (2_390_949_888, 9_513_171_840),
                                (2_916_319_232, 9_513_171_840),
                                (3_187_933_184, 9_513_171_840),
                                (3_713_269_760, 9_513_171_840)}),
    "llama3_1t": dict(params=1_183_035_102_480, model=2_366_163_292_416,
                      optimizer=14_198_010_802_176, rank0=(5_425_047_936, 13_865_244_924, 4),
                      shares={(0, 13_865_244_924), (4_595_488_128, 13_865_244_924),
                              (5_425_047_936, 13_865_244_924),
                              (5_425_099_680, 13_865_244_924)}),
}


@pytest.mark.parametrize("name", sorted(DLIO))
def test_llama3_sizes_are_dlios(name):
    shape, ranks, want = cs.load(MLPERF / f"{name}.yaml"), RANKS[name], DLIO[name]
    shares = cs.checkpoint(shape, ranks)
    assert shape.num_parameters == want["params"]
    assert cs.totals(shape, ranks) == (want["model"], want["optimizer"])
    assert (shares[0].model_bytes, shares[0].optimizer_bytes, len(shares[0].files)) == \
        want["rank0"]
    assert {(s.model_bytes, s.optimizer_bytes) for s in shares} == want["shares"]
    # every byte DLIO counts is in a file (no ZeRO-2 here), each file named once
    assert all(s.file_bytes == s.total_bytes for s in shares)
    names = [f.name for s in shares for f in s.files]
    assert len(names) == len(set(names))


def test_against_mlperfs_published_sizes():
    """DLIO prints bytes / 2**30 and calls it GB: 104.7 -> "105 GB", 911.2 -> "912 GB"
    (mlpstorage's LLM_SIZE_BY_RANK: 130 + 781), 5,292 -> "5.29 TB" (755 + 4,533). The
    1T's "18 TB" is 7/6 of DLIO's 15,427: LLM_SIZE_BY_RANK's (2571, 15426) is
    (15426 / 6, 15426), DLIO's total taken for the optimizer state alone."""
    gib = {n: sum(cs.totals(cs.load(MLPERF / f"{n}.yaml"), RANKS[n])) / GIB for n in DLIO}
    assert round(gib["llama3_8b"]) == 105
    assert gib["llama3_70b"] == pytest.approx(912, rel=1e-3)
    assert gib["llama3_405b"] / 1000 == pytest.approx(5.29, abs=0.005)
    assert gib["llama3_1t"] == pytest.approx(15_426.6, abs=0.1)
    assert gib["llama3_1t"] * 7 / 6 / 1000 == pytest.approx(18.0, rel=1e-3)


def test_dlio_file_names_by_zero_stage_and_pipeline():
    shape = cs.load(MLPERF / "llama3_405b.yaml")  # ZeRO-1, tp 8, pp 32: 512 = 8 x 32 x 2
    first = cs.rank_checkpoint(shape, 512, 0)
    assert [f.name for f in first.files] == [f"layer_{i}-model_0_model_states.pt"
                                             for i in range(5)] + \
        ["zero_pp_rank_0_mp_rank_0_optim_states.pt"]
    last_stage = cs.rank_checkpoint(shape, 512, 255)  # stage 31: layers 124..128
    assert [f.name for f in last_stage.files][-2:] == [
        "layer_128-model_255_model_states.pt", "zero_pp_rank_0_mp_rank_255_optim_states.pt"]
    second_copy = cs.rank_checkpoint(shape, 512, 256)  # ZeRO-1: only dp rank 0 saves the model
    assert [f.name for f in second_copy.files] == ["zero_pp_rank_1_mp_rank_0_optim_states.pt"]
    eight = cs.rank_checkpoint(cs.load(MLPERF / "llama3_8b.yaml"), 8, 3)
    assert [f.name for f in eight.files] == ["zero_pp_rank_3_mp_rank_0_model_states.pt",
                                             "zero_pp_rank_3_mp_rank_0_optim_states.pt"]
    assert cs.folder_of(4) == "global_epoch1_step4"


def test_zero_0_and_zero_2_as_dlio_counts_them():
    base = dict(name="m", num_layers=4, hidden_size=64, ffn_hidden_size=256, vocab_size=100,
                num_attention_heads=8, num_kv_heads=2)
    none = cs.ModelShape(**base, tensor=2, zero_stage=0)
    assert [s.total_bytes > 0 for s in cs.checkpoint(none, 6)] == [True, True] + [False] * 4
    two = cs.ModelShape(**base, zero_stage=2)
    second = cs.rank_checkpoint(two, 2, 1)  # counted, not written
    assert second.model_bytes > 0 and second.file_bytes == second.optimizer_bytes


@pytest.mark.parametrize("text,problem", [
    ("model: {type: transformer, num_layers: 4, parallelism: {tensor: 8}}\n", None),
    ("model: {type: cnn, num_layers: 4}\n", "only transformer"),
    ("model: {type: transformer, num_layers: 0}\n", "num_layers = 0"),
    ("model: {type: transformer, num_layers: 4, model_datatype: fp8}\n", "model_datatype"),
    ("model: {type: transformer, num_layers: 4, parallelism: {pipeline: 2, zero_stage: 3}}\n",
     "ZeRO stage 3"),
    ("model: {type: transformer, num_layers: 2, parallelism: {pipeline: 4}}\n", "fewer than"),
    ("model: {type: transformer, num_layers: 4, parallelism: {data: 2}}\n", "subset mode"),
    ("model: {type: transformer, num_layers: 4, transformer: {hidden_size: true}}\n",
     "must be int"),
    ("model: {type: transformer, num_layers: 4, flavour: 3}\n", "not a DLIO model field"),
    ("workflow: {checkpoint: true}\n", "no model section"),
])
def test_model_sections_refused_in_one_line(tmp_path, text, problem):
    f = tmp_path / "m.yaml"
    f.write_text(text)
    if problem is None:
        with pytest.raises(SpecError, match="not a multiple of tensor x pipeline = 8"):
            cs.checkpoint(cs.load(f), 12)
        return
    with pytest.raises(SpecError, match=problem) as e:
        cs.load(f)
    assert "\n" not in str(e.value)


def test_scaled_keeps_names_and_proportions_exactly():
    files = cs.rank_checkpoint(cs.load(MLPERF / "llama3_405b.yaml"), 512, 0).files
    small = cs.scaled(files, 64 << 20)
    assert [f.name for f in small] == [f.name for f in files]
    assert sum(f.nbytes for f in small) == 64 << 20
    whole = sum(f.nbytes for f in files)
    assert all(abs(s.nbytes / (64 << 20) - f.nbytes / whole) < 1e-6 for s, f in zip(small, files))
    assert [f.nbytes for f in cs.zero3_files(0, 7_000)] == [1_000, 6_000]  # fp16 : 3 x fp32


SIZE, TRANSFER = (3 << 20) + 123, (256 << 10) + 5  # nothing aligned, on purpose


def written(tmp_path, rank=1, index=2):
    w = ck.write(tmp_path, rank, SIZE, seed=11, transfer_size=TRANSFER, index=index)
    return w, tmp_path / "global_epoch1_step2"


def test_round_trip(tmp_path):
    w, folder = written(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == [
        "zero_pp_rank_1_mp_rank_0_model_states.pt", "zero_pp_rank_1_mp_rank_0_optim_states.pt"]
    assert w.nbytes == SIZE == sum(p.stat().st_size for p in folder.iterdir())
    assert w.write_s > 0 and w.fsync_s > 0 and w.wall_s >= w.seconds and w.MB_s > 0
    assert ck.drop_cache(folder) == 2
    r = ck.read_back(tmp_path, 1, SIZE, seed=11, transfer_size=1 << 20, index=2)
    assert r.problem is None and r.nbytes == SIZE and r.digest == w.digest and r.read_s > 0
    assert ck.verify(w, r) is None
    other = ck.write(tmp_path / "b", 1, SIZE, seed=12, transfer_size=TRANSFER, index=2)
    assert other.digest != w.digest  # the seed makes the content


def corrupt_flip(path):
    data = bytearray(path.read_bytes())
    data[100_000] ^= 0x01
    path.write_bytes(data)


def corrupt_truncate(path):
    os.truncate(path, path.stat().st_size - 1)


def corrupt_misplace(path):
    data = bytearray(path.read_bytes())
    data[5 * ck.UNIT:6 * ck.UNIT] = data[2 * ck.UNIT:3 * ck.UNIT]
    path.write_bytes(data)


@pytest.mark.parametrize("damage,reason", [
    (corrupt_flip, r"optim_states.pt: byte 100000 differs from what was written"),
    (corrupt_truncate, r"optim_states.pt is \d+ bytes, \d+ were written"),
    (corrupt_misplace, r"byte 3277\d\d differs .*unit there is rank 1's checkpoint 2, file 1, "
                       r"offset 131072"),
    (Path.unlink, r"optim_states.pt is missing"),
])
def test_damage_is_a_failed_checkpoint_with_one_line(tmp_path, damage, reason):
    w, folder = written(tmp_path)
    damage(folder / "zero_pp_rank_1_mp_rank_0_optim_states.pt")
    r = ck.read_back(tmp_path, 1, SIZE, seed=11, transfer_size=TRANSFER, index=2)
    why = ck.verify(w, r)
    assert why is not None and "\n" not in why
    assert re.search(reason, why), why


def test_verify_compares_with_the_write(tmp_path):
    w, _ = written(tmp_path)
    r = ck.read_back(tmp_path, 1, SIZE, seed=11, transfer_size=TRANSFER, index=2)
    assert "digest" in ck.verify(ck.WriteResult(**{**w.__dict__, "digest": "0" * 64}), r)
    assert ck.verify(None, r) is None


def full_disk_after(monkeypatch, limit):
    """os.write fails with ENOSPC once `limit` bytes are written (and writes short before)."""
    real, state = os.write, {"n": 0}

    def fake(fd, data):
        if state["n"] >= limit:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real(fd, bytes(data)[:min(len(data), 50_000)])  # short writes are continued
        state["n"] += n
        return n
    monkeypatch.setattr(ck.os, "write", fake)


def test_enospc_raises_and_leaves_nothing(tmp_path, monkeypatch):
    full_disk_after(monkeypatch, 2 << 20)
    with pytest.raises(WorkloadError, match=r"checkpoint 2 rank 1: writing "
                       r"zero_pp_rank_1_mp_rank_0_optim_states.pt: ENOSPC .*partial files "
                       r"removed") as e:
        written(tmp_path)
    assert "\n" not in str(e.value)
    assert list((tmp_path / "global_epoch1_step2").iterdir()) == []


def test_eio_at_fsync_raises(tmp_path, monkeypatch):
    def fail(fd):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(ck.os, "fsync", fail)
    with pytest.raises(WorkloadError, match="EIO"):
        written(tmp_path)


def test_file_size_limit_of_the_kernel_stops_a_write(tmp_path):
    """A real refusal from the kernel (RLIMIT_FSIZE: EFBIG) in a child process."""
    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
            "from testbed.workload import checkpoint as ck\n"
            "from testbed.errors import WorkloadError\n"
            "try:\n"
            f"    ck.write({str(tmp_path)!r}, 0, 4 << 20, seed=1, transfer_size=1 << 16)\n"
            "except WorkloadError as e:\n"
            "    print(e); sys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert "EFBIG" in proc.stdout and "partial files removed" in proc.stdout
    assert list((tmp_path / "global_epoch1_step1").iterdir()) == []


@pytest.mark.parametrize("kind", ck.RANK_KINDS)
def test_run_checkpoints_writes_then_reads_every_rank(tmp_path, kind):
    plan = ck.CheckpointPlan(ck.even_layouts(2, 1 << 20), seed=3, transfer_size=1 << 18,
                             num_write=2, num_read=2, interval_s=0.01)
    run = ck.run_checkpoints(tmp_path, plan, kind)
    assert run.error is None
    assert [(r.phase, r.index, r.rank) for r in run.results] == [
        (p, i, k) for p in ("write", "read") for i in (1, 2) for k in (0, 1)]
    assert all(r.ok and r.nbytes == 1 << 20 and r.MB_s > 0 for r in run.results)
    s = ck.summarise(run, plan.interval_s)
    assert s["failed"] == 0 and s["write_checkpoint_MB"] == pytest.approx(2 * 1.048576)
    slowest = [max(r.seconds for r in run.of("write", i)) for i in (1, 2)]
    assert s["write_duration_s"] == pytest.approx(sum(slowest) / 2)
    assert 0 < s["training_time_lost_pct"] < 100


def test_a_failing_rank_stops_the_run_and_counts_nothing(tmp_path, monkeypatch):
    real = ck.write

    def rank1_full(folder, rank, *args, **kw):
        if rank == 1 and kw.get("index") == 2:
            raise WorkloadError("checkpoint 2 rank 1: writing x: ENOSPC (No space left on device)")
        return real(folder, rank, *args, **kw)
    monkeypatch.setattr(ck, "write", rank1_full)
    plan = ck.CheckpointPlan(ck.even_layouts(2, 1 << 16), num_write=3, num_read=1)
    run = ck.run_checkpoints(tmp_path, plan, "thread")
    assert "ENOSPC" in run.error
    failed = [r for r in run.results if not r.ok]
    assert {r.rank for r in failed} == {0, 1} and all(r.nbytes == 0 for r in failed)
    assert any("another rank failed" in r.reason for r in failed)
    assert not run.of("write", 3) and not run.of("read", 1)
    assert ck.summarise(run, 0.0)["failed"] == 2


def test_training_time_lost():
    assert ck.training_time_lost_pct(1.0, 9.0) == pytest.approx(10.0)
    assert ck.training_time_lost_pct(0.0, 5.0) == 0.0
    with pytest.raises(SpecError):
        ck.training_time_lost_pct(-1.0, 5.0)


@pytest.mark.parametrize("bad", [
    dict(layouts=()), dict(num_write=1, num_read=2), dict(transfer_size=0),
    dict(interval_s=float("nan")), dict(num_write=-1)])
def test_plans_refused(bad):
    with pytest.raises(SpecError):
        ck.CheckpointPlan(**{"layouts": ck.even_layouts(1, 10), **bad})


def test_folders_made_from_the_top_down(tmp_path, monkeypatch):
    """make_folder never asks about a name below one that may not exist yet (an NFS
    client would cache the miss): it tries mkdir from the top, EEXIST being fine."""
    calls = []
    real = os.mkdir
    monkeypatch.setattr(ck.os, "mkdir", lambda p, *a: (calls.append(Path(p)), real(p, *a)))
    ck.make_folder(tmp_path / "a" / "b")
    ck.make_folder(tmp_path / "a" / "b")  # again: everything exists
    ours = [p for p in calls if tmp_path in p.parents]
    assert ours == [tmp_path / "a", tmp_path / "a" / "b"] * 2
    assert (tmp_path / "a" / "b").is_dir()
