"""[capture]: a packet capture on the first worker during repetition 0 of a point, and
its analysis into capture/<point>/ (rpcs.csv, timeline.csv, summary.json, inflight.png)
and the in-flight columns of that worker's row (record.CAPTURE). Capturing costs the
lab's CPU: compare captured rows with each other (column `captured`)."""

from __future__ import annotations

import json
import math
import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from testbed import atomic, topology
from testbed.experiment.plan.parse import CaptureOption
from testbed.experiment.record.record import CAPTURE
from testbed.network.engine import Network
from testbed.packets import nfs_rpc
from testbed.packets.sniffer import Capture

def slug(text: str) -> str:
    """A file-system-safe name for a point id."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)


def start(net: Network, worker: str, opt: CaptureOption, name: str,
          stack: ExitStack) -> Capture:
    """Start capturing on the worker's interface into the run's scratch folder; stopped
    (and its pcap removed unless kept) by the point's teardown stack."""
    folder = net.run_dir / "capture"
    if not folder.exists():
        folder = net.scratch("capture")
    cap = Capture(net.namespace(worker), topology.interface_name(worker, 0),
                  folder / f"{slug(name)}.pcap", seconds=opt.seconds,
                  max_bytes=opt.max_mib << 20)
    stack.callback(cap.result.path.unlink, missing_ok=True)
    cap.start()
    stack.callback(cap.stop)
    return cap


def analyse(cap: Capture, opt: CaptureOption, out: Path, name: str, rate_mbit: float,
            rtt_ms: float) -> dict[str, Any]:
    """Stop the capture, dissect it into out/capture/<name>/, return the row's columns."""
    cap.stop()
    d = out / "capture" / slug(name)
    d.mkdir(parents=True, exist_ok=True)
    pcap = cap.result.path
    a = nfs_rpc.analyse(pcap, rate_bps=rate_mbit * 1e6, rtt_s=rtt_ms / 1000.0)
    for name, frame in (("rpcs.csv", a.rpcs), ("timeline.csv", a.timeline)):
        with atomic.replacing(d / name) as tmp:
            frame.to_csv(tmp, index=False)
    summary = {**a.summary, "capture_packets": cap.result.packets,
               "capture_dropped": cap.result.dropped,
               "capture_stopped_by": cap.result.stopped_by}
    atomic.write_text(d / "summary.json", json.dumps(summary, indent=2, default=float))
    nfs_rpc.plot(a, d / "inflight.png", title=name)
    if opt.keep_pcap:
        pcap.replace(d / "capture.pcap")
    return {k: summary.get(k, math.nan) for k in CAPTURE}
