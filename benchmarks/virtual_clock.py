"""Benchmark (host side): the same command in the lab kernel on the host's clock and on the
virtual one, side by side in one run.
    .venv/bin/python -m benchmarks.virtual_clock [--clocks real,virtual] [--out DIR]
        -- CMD [ARGS...]
Runs `lab/run --clock C CMD` for each clock in turn (one after the other: the machine
quiet for each), `{out}` in CMD replaced by DIR/C (a results folder per clock; DIR lies in
this checkout, the only place a lab kernel writes, default results/virtual-clock). Per clock
it prints the wall time, the guest's own elapsed time (its clock, /proc/uptime: the
emulated time a virtual clock skips through) and their ratio, then CMD's closing lines
(lines like `RATIO min=..`, `DRIFT ..`, `AGREEMENT ..`). When CMD wrote results folders
(`testbed run`/`demo --out {out}`), it prints their points side by side: AU, MB/s, the
model's ratio, the limit and the marks, and a closing line over the points neither marked
    CLOCKS au_points=<largest AU difference> mbps_pct=<largest MB/s difference, %>
        wall_ratio=<real wall / virtual wall>
Examples (docs/virtual-clock.md has the measured output):
    benchmarks/virtual_clock.py -- .venv/bin/testbed demo --out {out}
    benchmarks/virtual_clock.py --out results/virtual-clock/rtt -- .venv/bin/python
        -m benchmarks.rtt_fidelity --count 300
(ping spins on the virtual clock: 300 probes per distance take ~3.5 minutes there.)
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common
from testbed.paths import LAB, REPO, RESULTS

CLOSING = re.compile(r"^[A-Z]{4,} \w+=")
GUEST_TIMER = ('read a _ < /proc/uptime; "$@"; rc=$?; read b _ < /proc/uptime; '
               'echo "GUEST_SECONDS $a $b"; exit $rc')


def run_under(clock: str, cmd: list[str], out: Path) -> tuple[float, float, str, int]:
    """(wall s, guest s, output, exit code) of CMD in a lab kernel with that clock."""
    argv = [str(LAB / "run"), "--clock", clock, "sh", "-c", GUEST_TIMER, "sh",
            *(a.replace("{out}", str(out)) for a in cmd)]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    wall = time.monotonic() - t0
    m = re.search(r"^GUEST_SECONDS (\S+) (\S+)$", proc.stdout, re.M)
    guest = float(m.group(2)) - float(m.group(1)) if m else float("nan")
    return wall, guest, proc.stdout, proc.returncode


def points(out: Path) -> "common.pd.DataFrame | None":
    """A results folder's points: AU, MB/s, model ratio, limit, mark; None if absent."""
    if not (out / "summary.csv").exists():
        return None
    s = common.read_summary(out)
    s["mbps"] = s["throughput_MB_s"]
    s["model_ratio"] = s["throughput_MB_s"] / s["model_MB_s"]
    keep = ["au_pct", "mbps", "model_ratio", "limited_by", "emulator_limited"]
    return s.set_index(["point_id", "site"])[keep]


def compare(folders: dict[str, Path], walls: dict[str, float]) -> None:
    """The clocks' points side by side and the CLOCKS closing line."""
    import pandas as pd

    tables = {c: points(f) for c, f in folders.items()}
    if any(t is None for t in tables.values()) or len(tables) < 2:
        return
    df = pd.concat([t.add_suffix(f"_{c}") for c, t in tables.items()], axis=1, join="inner")
    names = list(tables)
    marked = df[[f"emulator_limited_{c}" for c in names]].any(axis=1)
    clean = df[~marked]
    a, b = names[0], names[1]
    au = float((clean[f"au_pct_{a}"] - clean[f"au_pct_{b}"]).abs().max())
    mbps = float(((clean[f"mbps_{a}"] - clean[f"mbps_{b}"]).abs()
                  / clean[f"mbps_{a}"]).max() * 100)
    common.print_wide(df.round(3), 20)
    print(f"CLOCKS au_points={au:.2f} mbps_pct={mbps:.1f} "
          f"wall_ratio={walls[a] / walls[b]:.2f} marked={int(marked.sum())}")


def main() -> None:
    """Run CMD under each clock, print what each took and said, then compare."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clocks", default="real,virtual")
    ap.add_argument("--out", type=Path, default=RESULTS / "virtual-clock")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        sys.exit("virtual_clock: no command given (after --)")
    args.out = args.out.resolve()
    if not args.out.is_relative_to(REPO):
        sys.exit(f"virtual_clock: --out {args.out} is outside {REPO}, where the lab kernel "
                 "cannot write")
    folders, walls = {}, {}
    for clock in args.clocks.split(","):
        out = args.out / clock
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        wall, guest, text, rc = run_under(clock, cmd, out)
        (args.out / f"{clock}.log").write_text(text)
        folders[clock], walls[clock] = out, wall
        print(f"clock {clock}: wall {wall:.1f} s, guest {guest:.1f} s, "
              f"wall/guest {wall / guest:.3f}, exit {rc} ({args.out / f'{clock}.log'})")
        for line in text.splitlines():
            if CLOSING.match(line) and not line.startswith("GUEST_SECONDS"):
                print(f"  {line}")
    print(f"command: {shlex.join(cmd)}")
    compare(folders, walls)


if __name__ == "__main__":
    main()
