"""Benchmark (host side): the PoC's question for its data-heavy workloads, answered by
`testbed advise` at every cell of a grid and tabled.

    sudo LAB_MEM=4G .venv/bin/python -m benchmarks.poc_advise [--out DIR]
        [--workloads W,...] [--distances KM,...] [--gpus N,...] [--confirm-gpus N,...]
        [--rate R] [--slowdown-pct G] [--repetitions N] [--parallel N] [--model-only]
        [--host PROFILE]
    .venv/bin/testbed report DIR --markdown                   # the table, at any time

For each workload x distance x GPUs per site it runs `testbed advise` into
DIR/WORKLOAD-Dkm-Ngpu/ (the cheapest setting that keeps the slowdown within the goal,
confirmed in emulation where the cell's GPU count is in --confirm-gpus, the model's
answer elsewhere) and prints one markdown table over the cells' advice.json files, then

    POC_ADVISE cells=<n> confirmed=<n> not_confirmed=<n> model_only=<n> wall_min=<x>

A cell whose advice.json already holds its answer is not run again: after a crash, run
the same command to finish the grid. `testbed report DIR --markdown` prints the table of
a folder as it is (testbed.experiment.advise.advice_grid), which is how docs/ regenerate it.
Defaults: unet3d, resnet50, cosmoflow (h100) and llm7b over 100 Gbit/s at 60, 1,000 and
3,000 km, 1 and 8 GPUs per site, slowdown <= 1 %, 3 repetitions per confirmed point,
the default host profile (gpu-server; --host ideal: end hosts that never bind).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

from testbed.experiment.advise import advice_grid


def cell_name(workload: str, km: float, gpus: int) -> str:
    """A cell's folder name."""
    return f"{workload}-{km:g}km-{gpus}gpu"


def answered(folder: Path, confirm: bool) -> bool:
    """Whether a cell's advice.json already holds the answer asked for."""
    path = folder / advice_grid.RECORD
    if not path.exists():
        return False
    doc = json.loads(path.read_text())
    return bool(doc["confirmations"]) or not confirm


def run_cell(args: argparse.Namespace, workload: str, km: float, gpus: int,
             confirm: bool) -> None:
    """`testbed advise` for one cell, into its folder."""
    folder = args.out / cell_name(workload, km, gpus)
    cmd = ["advise", "--workload", workload, "--distance-km", f"{km:g}", "--rate", args.rate,
           "--workers", str(gpus), "--slowdown-pct", f"{args.slowdown_pct:g}",
           "--host", args.host, "--out", str(folder)]
    if confirm:
        cmd += ["--repetitions", str(args.repetitions), "--confirm", "2",
                "--parallel", str(args.parallel)]
    else:
        cmd += ["--model-only"]
    print(f"== {folder.name} ({'confirm' if confirm else 'model only'})", flush=True)
    common.run_testbed(cmd)


def table(out: Path) -> tuple[str, dict[str, float]]:
    """The markdown table over a folder's cells, and the counts for the closing line."""
    return "\n".join(advice_grid.table(out)), advice_grid.counts(out)


def _list(kind: type, text: str) -> list[Any]:
    """A comma-separated option as a list of `kind`."""
    return [kind(x) for x in text.split(",") if x.strip()]


def main() -> int:
    """Run the grid's cells not yet answered, then print the table and closing line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/poc-advise"))
    ap.add_argument("--workloads", default="unet3d-h100,resnet50-h100,cosmoflow-h100,llm7b-h100")
    ap.add_argument("--distances", default="60,1000,3000")
    ap.add_argument("--gpus", default="1,8")
    ap.add_argument("--confirm-gpus", default="1,8",
                    help="GPU counts whose cells are confirmed in emulation")
    ap.add_argument("--rate", default="100gbit")
    ap.add_argument("--slowdown-pct", type=float, default=1.0)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--model-only", action="store_true", help="no cell is confirmed")
    ap.add_argument("--host", default="gpu-server",
                    help="the host profile every cell assumes (docs/hosts.md; ideal: the "
                    "table before host profiles)")
    args = ap.parse_args()
    args.out = args.out.resolve()
    confirm_gpus = set() if args.model_only else set(_list(int, args.confirm_gpus))
    t0 = time.monotonic()
    for w in _list(str, args.workloads):
        for n in _list(int, args.gpus):
            for km in _list(float, args.distances):
                confirm = n in confirm_gpus
                if not answered(args.out / cell_name(w, km, n), confirm):
                    run_cell(args, w, km, n, confirm)
    text, counts = table(args.out)
    print(text)
    print(f"this run: {(time.monotonic() - t0) / 60:.1f} min of wall time")
    print("POC_ADVISE " + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                                   for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
