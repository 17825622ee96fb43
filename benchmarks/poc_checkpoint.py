"""Benchmark (host side): the PoC's checkpoint question, answered by `testbed advise
--checkpoint` at every cell of a grid and tabled, as poc_advise does for reads.

    .venv/bin/python -m benchmarks.poc_checkpoint [--out DIR] [--configs F,...]
        [--distances KM,...] [--rate R] [--lost-pct G] [--interval-s S] [--host PROFILE]
        [--confirm N [--repetitions R]]
    .venv/bin/testbed report DIR --markdown                   # the table, at any time

For each MLPerf Storage llama3 checkpoint config x distance it runs `testbed advise
--checkpoint CONFIG --model-only` into DIR/CONFIG-Dkm/: the cheapest write-path setting
that keeps the share of training time lost to checkpoints within --lost-pct at
--interval-s between checkpoints (default 1 % at 30 min), or the limit that stops every
setting. The ranks are MLPerf's (8 for 8B, 64 for 70B), 8 to a GPU host: a cell is one
host's 8 ranks sharing its line (each writes its own shard). Then it prints one markdown
table over the cells' advice.json files and

    POC_CHECKPOINT cells=<n> model_only=<n> wall_min=<x>

The answers are the model's (testbed/model/write.py); with --confirm N each cell's first N
candidates are measured in a lab kernel as `testbed advise --checkpoint` does without
--model-only (scaled to the lab's memory; LAB_MEM sets the kernel's), and the table's
verdict column says whether the emulator confirmed the model's answer.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common

from testbed.experiment.advise import advice_grid

MLPERF = common.REPO / "testbed" / "workload" / "mlperf"


def run_cell(args: argparse.Namespace, config: str, km: float) -> None:
    """`testbed advise --checkpoint` for one cell, into its folder (this checkout's code)."""
    folder = args.out / f"{Path(config).stem}-{km:g}km"
    cmd = [sys.executable, "-m", "testbed.cli", "advise", "--checkpoint",
           str(MLPERF / config), "--distance-km", f"{km:g}", "--rate", args.rate,
           "--lost-pct", f"{args.lost_pct:g}", "--checkpoint-interval-s",
           f"{args.interval_s:g}", "--host", args.host, "--out", str(folder)]
    cmd += (["--confirm", str(args.confirm), "--repetitions", str(args.repetitions),
             "--parallel", "1"] if args.confirm else ["--model-only"])
    print(f"== {folder.name}", flush=True)
    subprocess.run(cmd, cwd=common.REPO, check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    """Run every cell, then print the table and closing line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/poc-checkpoint"))
    ap.add_argument("--configs", default="llama3_8b.yaml,llama3_70b.yaml")
    ap.add_argument("--distances", default="60,1000,3000")
    ap.add_argument("--rate", default="100gbit")
    ap.add_argument("--lost-pct", type=float, default=1.0)
    ap.add_argument("--interval-s", type=float, default=1800.0)
    ap.add_argument("--host", default="gpu-server")
    ap.add_argument("--confirm", type=int, default=0,
                    help="confirm at most N candidates per cell in emulation (default: the "
                         "model's answer only)")
    ap.add_argument("--repetitions", type=int, default=3)
    args = ap.parse_args()
    args.out = args.out.resolve()
    t0 = time.monotonic()
    for config in (c for c in args.configs.split(",") if c.strip()):
        for km in (float(d) for d in args.distances.split(",") if d.strip()):
            run_cell(args, config.strip(), km)
    print("\n".join(advice_grid.table(args.out)))
    counts = advice_grid.counts(args.out)
    print(f"this run: {(time.monotonic() - t0) / 60:.2f} min of wall time")
    print(f"POC_CHECKPOINT cells={counts['cells']:.0f} model_only={counts['model_only']:.0f} "
          f"wall_min={counts['wall_min']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
