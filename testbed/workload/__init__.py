"""Training-input workload: the training set (dataset), MLPerf Storage presets, and a
loader feeding an emulated accelerator over a measured window (loader, window), and
loaders sharing a line measured over one window (together), what a fibre event cost a
loader, from its steps (recovery); a recorded job's file I/O
(trace, tracefile, strace) replayed against a dataset of its shape (replay). Knows
nothing of NFS or namespaces: it reads files under a path."""

from testbed.workload.dataset import (FORMATS, RECORD_HEADER, DatasetSpec, Sample,
                                          expected_digest, file_name, generate, samples_of)
from testbed.workload.loader import (ACCESS, READER_KINDS, LoaderRun, WorkloadSpec,
                                         die_with_parent, read_sample, run_loader, summarise)
from testbed.workload.presets import PRESETS, preset
from testbed.workload.together import Together, common_window
from testbed.workload.window import Step, Window, WindowSpec

__all__ = ["FORMATS", "RECORD_HEADER", "DatasetSpec", "Sample", "expected_digest",
           "file_name", "generate", "samples_of", "ACCESS", "READER_KINDS", "LoaderRun",
           "WorkloadSpec", "die_with_parent", "read_sample", "run_loader", "summarise",
           "PRESETS", "preset", "Step", "Together", "Window", "WindowSpec",
           "common_window"]
