"""How big a checkpoint is, rank by rank, and which files hold it: exactly as DLIO sizes
and names them for a transformer model (the MLPerf Storage v2.0 `llama3_*.yaml` configs).

Source: argonne-lcf/dlio_benchmark, branch mlperf_storage_v2.0 (the one MLPerf Storage
v2.0 installs: mlcommons/storage pyproject.toml), commit 392621b230472c4206e4299ece689700e07544a4,
dlio_benchmark/checkpointing/base_checkpointing.py (last changed by 606bbec, 2025-05-22;
the same on main at e1919d7): get_num_parameters, get_layer_parameters, get_layer_index,
get_optimization_groups, __init__ (which ranks hold what) and save_checkpoint (file names);
the pytorch mechanism (pytorch_checkpointing.py) torch.saves each state as `NAME.pt`.

DLIO's formula, with h = hidden_size, F = ffn_hidden_size, V = vocab_size, L = num_layers,
kv = (h // num_attention_heads) * num_kv_heads, tp/pp = tensor/pipeline parallelism,
mp = tp x pp, dp = ranks // mp, s = dp under ZeRO-3 else 1 (all divisions floor):
  parameters P = 2 V h + L (h + h (h + 2 kv) + h h + h + 3 F h) + h
  model bytes of a rank = model_datatype bytes x the sum over its layers (pipeline stage
    p holds layers evenly split, stage 0 also layer 0, the last stage also L+1, L+2) of
    layer 0 and L+1 (embedding, lm_head): h V // tp // s; layer L+2 (final norm): h // s;
    layers 1..L: h//s, h(h+2kv)//tp//s, h h//tp//s, h//s, 2 h F//tp//s, h F//tp//s
    -- held by every rank under ZeRO-2/3, by data-parallel rank 0 only under ZeRO-1,
    by ranks < mp only without ZeRO;
  optimizer bytes of a rank = optimizer_datatype bytes x 3 (n + 5 h), with
    n = P // (dp mp) under ZeRO >= 1, P // mp without (and then ranks >= mp hold none).
DLIO reports the sum over ranks in GiB and calls it GB. What is not emulated: torch.save's
pickle/zip framing around the tensors (a few KB per file; the bytes here are the tensors').
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from testbed import userfiles
from testbed.errors import SpecError
from testbed.schema import show

DTYPE_BYTES = {"int8": 1, "uint8": 1, "fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}
OPTIMIZER_GROUPS = 3  # DLIO: [n, 5h] three times (fp32 master weights and Adam's moments)
NORM_WIDTH = 5  # DLIO's small tensor after each group: hidden_size x 5 elements
EXT = "pt"  # DLIO's pytorch mechanism; MLPerf's checkpoint configs are all framework: pytorch
EPOCH = 1  # DLIO's checkpoint-only loop names every checkpoint global_epoch1_step<N>


@dataclass(frozen=True)
class ModelShape:
    """A DLIO `model` section: the transformer's shape, datatypes and parallelism (DLIO's
    defaults, dlio_benchmark/utils/config.py, for fields the file leaves out)."""

    name: str = "model"
    num_layers: int = -1
    hidden_size: int = 2048
    ffn_hidden_size: int = 8192
    vocab_size: int = 32000
    num_attention_heads: int = 32
    num_kv_heads: int = 8
    model_datatype: str = "fp16"
    optimizer_datatype: str = "fp32"
    tensor: int = 1
    pipeline: int = 1
    zero_stage: int = 0

    def __post_init__(self) -> None:
        for problem in _problems(self):
            raise SpecError(f"model {self.name}: {problem}")

    @property
    def model_parallelism(self) -> int:
        """Ranks that hold one copy of the model between them (tensor x pipeline)."""
        return self.tensor * self.pipeline

    @property
    def num_parameters(self) -> int:
        """The model's parameter count (DLIO's get_num_parameters)."""
        h, f, v, n = self.hidden_size, self.ffn_hidden_size, self.vocab_size, self.num_layers
        kv = h // self.num_attention_heads * self.num_kv_heads
        return 2 * v * h + (h + h * (h + 2 * kv) + h * h + h + 3 * f * h) * n + h

    def layer_parameters(self, layer: int, dp: int) -> list[int]:
        """Elements per tensor of one layer on one rank (DLIO's get_layer_parameters):
        layer 0 and L+1 the embedding and lm_head, L+2 the final norm, 1..L the blocks."""
        h, tp, n = self.hidden_size, self.tensor, self.num_layers
        s = dp if self.zero_stage >= 3 else 1
        kv = h // self.num_attention_heads * self.num_kv_heads
        if layer in (0, n + 1):
            return [h * self.vocab_size // tp // s]
        if layer == n + 2:
            return [h // s]
        f = self.ffn_hidden_size
        return [h // s, h * (h + 2 * kv) // tp // s, h * h // tp // s, h // s,
                h * 2 * f // tp // s, h * f // tp // s]

    def layers_of(self, stage: int) -> range:
        """The layers pipeline stage `stage` holds (DLIO's get_layer_index)."""
        per, rem = divmod(self.num_layers, self.pipeline)
        start = stage * per + min(stage, rem) + 1
        end = start + per - (0 if stage < rem else 1)
        return range(0 if stage == 0 else start,
                     (self.num_layers + 2 if stage == self.pipeline - 1 else end) + 1)


# Bounds far above any model DLIO describes (llama3 405B: 126 layers, hidden 16,384,
# vocabulary 128,256): a size is computed per layer, and a rank's bytes stay a float.
LIMITS = {"num_layers": 100_000, "hidden_size": 10**7, "ffn_hidden_size": 10**8,
          "vocab_size": 10**8, "num_attention_heads": 10**5, "num_kv_heads": 10**5,
          "tensor": 10**5, "pipeline": 10**5}


def _problems(m: ModelShape) -> list[str]:
    """What is wrong with a shape, in DLIO's terms (empty when nothing)."""
    out = [f"{f.name} = {show(getattr(m, f.name))}: must be an integer >= 1"
           for f in fields(m) if f.type == "int" and f.name != "zero_stage"
           and (not _is_int(getattr(m, f.name)) or getattr(m, f.name) < 1)]
    out += [f"{f} = {show(getattr(m, f))}: one of {', '.join(DTYPE_BYTES)}"
            for f in ("model_datatype", "optimizer_datatype") if getattr(m, f) not in DTYPE_BYTES]
    out += [f"{f} = {show(getattr(m, f))}: at most {limit:,}" for f, limit in LIMITS.items()
            if _is_int(getattr(m, f)) and getattr(m, f) > limit]
    if not _is_int(m.zero_stage) or m.zero_stage not in (0, 1, 2, 3):
        out.append(f"parallelism.zero_stage = {show(m.zero_stage)}: 0, 1, 2 or 3")
    elif not out and m.num_layers < m.pipeline:
        out.append(f"num_layers {m.num_layers} is fewer than parallelism.pipeline {m.pipeline}")
    elif not out and m.pipeline > 1 and m.zero_stage == 3:
        out.append("ZeRO stage 3 is not compatible with pipeline parallelism (DLIO refuses it)")
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ShardFile:
    """One file of a rank's checkpoint: its name in the checkpoint's folder, its bytes."""

    name: str
    nbytes: int


@dataclass(frozen=True)
class RankCheckpoint:
    """What one rank holds (as DLIO counts it) and the files it writes.

    Under ZeRO-2 a data-parallel rank other than 0 holds model states that DLIO counts
    but does not write: model_bytes then exceeds what its files hold."""

    rank: int
    model_bytes: int
    optimizer_bytes: int
    files: tuple[ShardFile, ...]

    @property
    def total_bytes(self) -> int:
        """Model and optimizer state (DLIO's per-rank checkpoint size)."""
        return self.model_bytes + self.optimizer_bytes

    @property
    def file_bytes(self) -> int:
        """Bytes the rank's files hold."""
        return sum(f.nbytes for f in self.files)


def data_parallelism(shape: ModelShape, ranks: int) -> int:
    """Copies of the model across `ranks` (DLIO's default mode); SpecError when the
    ranks are not a whole number of model-parallel groups."""
    mp = shape.model_parallelism
    if not _is_int(ranks) or ranks < 1 or ranks % mp:
        raise SpecError(f"model {shape.name}: {show(ranks)} ranks is not a multiple of "
                        f"tensor x pipeline = {mp}")
    return ranks // mp


def rank_checkpoint(shape: ModelShape, ranks: int, rank: int) -> RankCheckpoint:
    """Rank `rank`'s share of a checkpoint of `shape` trained on `ranks` ranks."""
    dp, mp = data_parallelism(shape, ranks), shape.model_parallelism
    if not _is_int(rank) or not 0 <= rank < ranks:
        raise SpecError(f"model {shape.name}: rank {show(rank)} is not in 0..{ranks - 1}")
    if shape.zero_stage == 0 and rank >= mp:
        return RankCheckpoint(rank, 0, 0, ())  # without ZeRO only the first copy saves
    dp_rank, mp_rank = rank // mp, rank % mp
    stage = (rank // shape.tensor) % shape.pipeline
    layers = {i: sum(shape.layer_parameters(i, dp)) * DTYPE_BYTES[shape.model_datatype]
              for i in shape.layers_of(stage)}
    if shape.zero_stage == 1 and dp_rank != 0:
        layers = {}
    n = shape.num_parameters // (dp * mp if shape.zero_stage else mp)
    optimizer = OPTIMIZER_GROUPS * (n + NORM_WIDTH * shape.hidden_size) * \
        DTYPE_BYTES[shape.optimizer_datatype] if n > 0 else 0
    prefix = f"zero_pp_rank_{dp_rank}_mp_rank_{mp_rank}"
    files = [*_model_files(shape, layers, dp_rank, mp_rank, prefix),
             ShardFile(f"{prefix}_optim_states.{EXT}", optimizer)]
    return RankCheckpoint(rank, sum(layers.values()), optimizer,
                          tuple(f for f in files if f.nbytes > 0))


def _model_files(shape: ModelShape, layers: dict[int, int], dp_rank: int, mp_rank: int,
                 prefix: str) -> list[ShardFile]:
    """The model-state files as DLIO's save_checkpoint names them: under ZeRO-1/2 data-
    parallel rank 0 writes one file per layer (pipeline parallelism) or one file; under
    ZeRO-0/3 every saving rank writes one file of its shard."""
    if shape.zero_stage not in (1, 2):
        return [ShardFile(f"{prefix}_model_states.{EXT}", sum(layers.values()))]
    if dp_rank != 0:
        return []
    if shape.pipeline > 1:
        return [ShardFile(f"layer_{i}-model_{mp_rank}_model_states.{EXT}", b)
                for i, b in layers.items()]
    return [ShardFile(f"model_{mp_rank}_model_states.{EXT}", sum(layers.values()))]


def checkpoint(shape: ModelShape, ranks: int) -> list[RankCheckpoint]:
    """Every rank's share of one checkpoint, rank 0 first."""
    data_parallelism(shape, ranks)
    return [rank_checkpoint(shape, ranks, r) for r in range(ranks)]


def totals(shape: ModelShape, ranks: int) -> tuple[int, int]:
    """(model bytes, optimizer bytes) of one whole checkpoint, summed over the ranks as
    DLIO's allreduce does (it prints them / 2**30 as "GB")."""
    shares = checkpoint(shape, ranks)
    return sum(s.model_bytes for s in shares), sum(s.optimizer_bytes for s in shares)


def folder_of(index: int) -> str:
    """The folder DLIO writes checkpoint `index` (1, 2, ...) into."""
    return f"global_epoch{EPOCH}_step{index}"


def scaled(files: tuple[ShardFile, ...], size_bytes: int) -> tuple[ShardFile, ...]:
    """The same files resized to hold `size_bytes` in all, each in its DLIO proportion
    (largest remainders, so the sizes add up exactly): a lab-sized checkpoint with DLIO's
    names and file count. Files that would be empty are kept at 1 byte when size allows."""
    whole = sum(f.nbytes for f in files)
    if not files or whole <= 0 or size_bytes < 0:
        raise SpecError(f"cannot scale {len(files)} files of {whole} bytes to {size_bytes}")
    exact = [f.nbytes * size_bytes / whole for f in files]
    sizes = [math.floor(x) for x in exact]
    order = sorted(range(len(files)), key=lambda i: sizes[i] - exact[i])
    for i in order[:size_bytes - sum(sizes)]:
        sizes[i] += 1
    return tuple(replace(f, nbytes=n) for f, n in zip(files, sizes))


def zero3_files(rank: int, size_bytes: int, model_datatype: str = "fp16",
                optimizer_datatype: str = "fp32") -> tuple[ShardFile, ...]:
    """A rank's two files as DLIO writes them under ZeRO-3 with no model parallelism
    (llama3_8b's layout: zero_pp_rank_<rank>_mp_rank_0_{model,optim}_states.pt), holding
    size_bytes split as DLIO splits them: model datatype bytes : 3 x optimizer's."""
    prefix = f"zero_pp_rank_{rank}_mp_rank_0"
    weights = (ShardFile(f"{prefix}_model_states.{EXT}", DTYPE_BYTES[model_datatype]),
               ShardFile(f"{prefix}_optim_states.{EXT}",
                         OPTIMIZER_GROUPS * DTYPE_BYTES[optimizer_datatype]))
    return scaled(weights, size_bytes)


# The model section's fields: DLIO's dotted name -> (ModelShape attribute, YAML types).
MODEL_FIELDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "name": ("name", (str,)), "num_layers": ("num_layers", (int,)),
    "model_datatype": ("model_datatype", (str,)),
    "optimizer_datatype": ("optimizer_datatype", (str,)),
    "parallelism.tensor": ("tensor", (int,)), "parallelism.pipeline": ("pipeline", (int,)),
    "parallelism.zero_stage": ("zero_stage", (int,)),
    **{f"transformer.{k}": (k, (int,)) for k in (
        "vocab_size", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads")},
}
# Read and not sizing a checkpoint (model.type is checked: only transformers are sized).
MODEL_IGNORED = {"type", "model_size"}


def from_dlio(doc: Any, where: str) -> ModelShape:
    """The ModelShape of a DLIO workload document's `model` section; SpecError (one
    line) for a missing or malformed section, a non-transformer model, or subset mode."""
    model = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(model, dict):
        raise SpecError(f"{where}: no model section (a mapping) to size a checkpoint from")
    if model.get("type") != "transformer":
        raise SpecError(f"{where}: model.type = {show(model.get('type'))}: only transformer "
                        "checkpoints are sized (num_layers, transformer.*)")
    flat = _flatten(model)
    if "parallelism.data" in flat:
        raise SpecError(f"{where}: model.parallelism.data (DLIO's subset mode) is not emulated")
    values: dict[str, Any] = {}
    for key, value in flat.items():
        if key in MODEL_IGNORED:
            continue
        if key not in MODEL_FIELDS:
            raise SpecError(f"{where}: model.{key}: not a DLIO model field; known: "
                            f"{', '.join(MODEL_FIELDS)}")
        attr, types = MODEL_FIELDS[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise SpecError(f"{where}: model.{key} = {show(value)}: must be "
                            f"{' or '.join(t.__name__ for t in types)}")
        values[attr] = value
    try:
        return ModelShape(**values)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _flatten(model: dict[str, Any]) -> dict[str, Any]:
    """{"parallelism.tensor": 8, "num_layers": 80, ...}: the section one level deep."""
    flat: dict[str, Any] = {}
    for key, value in model.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{sub}": v for sub, v in value.items()})
        else:
            flat[str(key)] = value
    return flat


def load(path: str | Path) -> ModelShape:
    """The ModelShape of a DLIO YAML file's model section (SpecError in one line)."""
    import yaml
    p = Path(path)
    text = userfiles.read_text(p, "DLIO config", "DLIO configs are YAML")
    try:
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise SpecError(f"{p}: not a readable DLIO YAML file: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") \
            from None
    return from_dlio(doc, str(p))
