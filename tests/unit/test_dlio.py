"""DLIO workload configs read as they are: MLPerf Storage's files unchanged, the
presets read from them (one source per number), what is not emulated named in one line,
malformed files refused in one line, and the experiment file's and command line's ways
to name one."""

import logging
from pathlib import Path

import pytest

from testbed import cli
from testbed.errors import SpecError
from testbed.experiment.plan import plan as plan_mod
from testbed.workload import dlio, presets
from testbed.workload.dlio_checkpoint import CheckpointJob

MLPERF = Path(presets.MLPERF_DIR)
TRAINING = sorted(p for p in MLPERF.glob("*.yaml")
                  if not p.stem.startswith("llama") and "datagen" not in p.stem)
CHECKPOINTING = sorted(MLPERF.glob("llama3_*.yaml"))
DATAGEN = sorted(MLPERF.glob("*_datagen.yaml"))


def test_every_mlperf_config_is_here_and_read_or_refused_in_one_line():
    assert (len(TRAINING), len(CHECKPOINTING), len(DATAGEN)) == (6, 4, 3)
    for path in TRAINING:
        job = dlio.load(path)
        assert job.batch >= 1 and job.compute_ms > 0 and 0 < job.au <= 1
    for path in CHECKPOINTING:
        job = dlio.load(path)
        assert isinstance(job, CheckpointJob)
        assert (job.writes, job.reads, job.interval_s, job.fsync) == (10, 10, 5, True)
    for path in DATAGEN:  # writes a dataset: neither training nor checkpoints
        with pytest.raises(SpecError, match="workflow: this file writes a dataset") as e:
            dlio.load(path)
        assert "\n" not in str(e.value)


def test_unet3d_h100_takes_dlio_numbers():
    job = dlio.load(MLPERF / "unet3d_h100.yaml")
    k = job.knobs()
    assert (k["batch"], k["compute_ms"], k["readers"], k["prefetch"]) == (7, 323.0, 4, 2)
    assert k["file_kib"] == 146_600_628 // 1024 and k["access"] == "file"
    assert k["shuffle"] is True and job.au_bar == 90.0
    # what it leaves out is said: sizes vary around the mean, its checkpoints
    line = dlio.warning(job)
    assert "dataset.record_length_bytes_stdev" in line and "checkpoint" in line
    assert "\n" not in line


def test_resnet50_reads_records_from_files_of_1251():
    k = dlio.load(MLPERF / "resnet50_h100.yaml").knobs()
    assert k["access"] == "record" and k["format"] == "record"
    assert k["records_per_file"] == 1251
    assert abs(k["file_kib"] * 1024 / 1251 - 114_660.07) < 1024 / 1251 + 1
    assert k["shuffle"] is False  # DLIO's default: off


@pytest.mark.parametrize("name", sorted(presets.MLPERF))
def test_presets_are_their_mlperf_configs(name):
    job = dlio.load(MLPERF / presets.MLPERF[name])
    assert presets.knob_values(name) == job.knobs()
    assert presets.PRESETS[name]["au_bar"] == job.au_bar


def test_scale_keeps_the_demand():
    full, tenth = dlio.load(MLPERF / "unet3d_h100.yaml"), 0.1
    a, b = full.knobs(), full.knobs(tenth)
    demand = lambda k: k["file_kib"] * k["batch"] / k["compute_ms"]  # noqa: E731
    assert abs(demand(b) / demand(a) - 1) < 0.01


@pytest.mark.parametrize("text,problem", [
    ("- a\n- b\n", "not a DLIO workload"),
    ("reader: {batch_size: -3}\n", "reader.batch_size = -3"),
    ("reader: {batch_size: 0}\n", "reader.batch_size must be >= 1"),
    ("reader: {batch_size: seven}\n", "must be int"),
    ("reader: {read_threads: true}\n", "must be int"),
    ("train: {computation_time: .nan}\n", "finite"),
    ("metric: {au: 1.5}\n", "metric.au"),
    ("reader: {sample_shuffle: sometimes}\n", "off, seed or random"),
    ("reader: [\n", "not valid YAML"),
    ("workflow: {train: false, checkpoint: true}\n", "no model section"),
    ("workflow: {train: false}\n", "writes nothing"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply|not valid YAML"),
])
def test_malformed_configs_are_refused_in_one_line(tmp_path, text, problem):
    f = tmp_path / "job.yaml"
    f.write_text(text)
    with pytest.raises(SpecError, match=problem) as e:
        dlio.load(f)
    assert "\n" not in str(e.value)


def test_unknown_fields_are_named_not_fatal(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("reader: {batch_size: 2, fancy_knob: 3}\nextra: 1\n")
    job = dlio.load(f)
    assert job.batch == 2
    assert "reader.fancy_knob" in dlio.warning(job) and "extra" in dlio.warning(job)


def experiment(tmp_path, workload_table, extra=""):
    (tmp_path / "job.yaml").write_text((MLPERF / "cosmoflow_h100.yaml").read_text())
    f = tmp_path / "e.toml"
    f.write_text('name = "e"\n[fixed]\nrate = "10gbit"\n' + extra +
                 '[sweep]\ndistance_km = [0, 100]\n[dataset]\nfiles = 4\n'
                 f'[workload]\n{workload_table}\n')
    return f


def test_an_experiment_names_a_config_and_its_own_values_win(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        plan = plan_mod.load(experiment(tmp_path, 'dlio = "job.yaml"\nreaders = 16'))
    far = plan.points[-1]
    assert far.workload.readers == 16 and far.workload.batch == 1  # file's, then DLIO's
    assert far.workload.compute_ms == 3.5 and plan.au_bar == 70.0
    assert any("not emulated" in r.message for r in caplog.records)


def test_a_config_and_a_preset_together_are_refused(tmp_path):
    f = experiment(tmp_path, 'dlio = "job.yaml"', extra='workload = "unet3d-h100"\n')
    with pytest.raises(SpecError, match="keep one"):
        plan_mod.load(f)


def test_the_command_line_config_replaces_the_files_workload(tmp_path):
    f = experiment(tmp_path, "", extra='workload = "unet3d-h100"\n')
    plan = plan_mod.load(f, {"dlio": str(MLPERF / "resnet50_h100.yaml")})
    assert plan.points[-1].workload.batch == 400 and plan.au_bar == 90.0


def test_run_dlio_check_and_its_errors(capsys):
    assert cli.main(["run", "--dlio", str(MLPERF / "cosmoflow_h100.yaml"), "--check"]) == 0
    assert cli.main(["run", "--dlio", "/nonexistent/job.yaml", "--check"]) == 2
    assert "not found" in capsys.readouterr().err
    assert cli.main(["run", "--check"]) == 2
    assert "--dlio" in capsys.readouterr().err
