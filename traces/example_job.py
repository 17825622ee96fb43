"""The job behind traces/example-loader.trace: the project's own training-input loader
(testbed.workload.loader.run_loader) reading a small dataset from a folder, as a training
job would, for a couple of seconds.

    python traces/example_job.py --generate DIR   write the dataset (16 files of 256 KiB)
    python traces/example_job.py DIR              run the loader on it (2 reader threads,
                                                  batches of 2, 20 ms compute, 64 KiB reads)
"""

import sys
from pathlib import Path

from testbed.workload import DatasetSpec, WindowSpec, WorkloadSpec, run_loader

DATASET = DatasetSpec(files=16, file_kib=256)
WORKLOAD = WorkloadSpec(batch=2, compute_ms=20, readers=2, prefetch=2, read_kib=64)
WINDOW = WindowSpec(warmup_min_s=0.5, warmup_max_s=1.0, measure_s=1.0, measure_max_s=1.5,
                    measure_stall_s=1.0, min_steps=10)


def main(args: list[str]) -> int:
    """Generate the dataset (--generate DIR) or run the loader on DIR."""
    if args[:1] == ["--generate"]:
        DATASET.generate(Path(args[1]))
        return 0
    run = run_loader(Path(args[0]), WORKLOAD, WINDOW)
    print(f"{len(run.steps)} steps, {sum(s.bytes for s in run.steps)} bytes")
    return 0 if run.error is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
