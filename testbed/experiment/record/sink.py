"""The one writer of a results folder when runs are measured elsewhere (lab kernels on this
host or Dask workers on others): a run's rows are appended to results.csv (fsynced, as
the in-kernel runner does), its raw step timings to steps.csv, and the files its lab
kernel wrote (captures) into the folder; search.csv and meta.json at the end.
Only the dispatching thread calls it, so nothing is written concurrently.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from testbed import atomic, results
from testbed.experiment.record import record


def _value(v: Any) -> Any:
    """A value as the in-kernel writer would have written it (JSON brings NaN back as
    float('nan') and None for missing; both are written as the runner writes them)."""
    return "" if v is None else v


class Sink:
    """Appends what lab kernels measured into one results folder."""

    def __init__(self, store: results.ResultStore) -> None:
        """Write into the folder of `store` (its results.csv columns)."""
        self.store = store
        self.out = store.out

    def rows(self, rows: list[dict[str, Any]]) -> None:
        """Append a run's rows to results.csv (fsynced)."""
        self.store.append_rows([{k: _value(v) for k, v in r.items()} for r in rows])

    def steps(self, lines: list[str]) -> None:
        """Append a run's steps.csv lines (as its lab kernel wrote them), fsynced."""
        if not lines:
            return
        path = self.out / "steps.csv"
        new = not path.exists()
        with atomic.appending(path) as fh:
            if new:
                csv.writer(fh).writerow(record.STEP_COLUMNS)
            fh.write("\n".join(lines) + "\n")

    def files(self, files: dict[str, bytes]) -> list[Path]:
        """Write a job's artefacts under the folder (relative paths only); their paths."""
        written = []
        for rel, data in files.items():
            path = (self.out / rel).resolve()
            if self.out.resolve() not in path.parents:
                continue  # never outside the results folder
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(path, data)
            written.append(path)
        return written

    def search(self, rows: list[dict[str, Any]]) -> Path:
        """search.csv: one row per setting, in the plan's order (as the sequential search
        writes it)."""
        path = self.out / "search.csv"
        with atomic.replacing(path) as tmp, open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=record.SEARCH_COLUMNS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        return path
