"""Topologies: Mininet-compatible descriptions built from specs. Building one runs nothing.

SiteTopo        a mininet.topo.Topo with helpers for the testbed's roles: storage hosts,
                GPU workers, switches, LAN links and fibre links (a FibreSpec on the link).
load_topologies the registry: every `topos = {...}` in the project's topologies/*.py files
                (the same files `mn --custom` reads).
build           name + parameters (text from the CLI or values from TOML) -> a Topo, with
                parameters checked against the topology's build() signature.
describe        a Topo -> plain data (nodes, addresses, links with delay/rate/limit) for
                `testbed topo show` and for results' meta.json.

Addressing: every topology is one layer-2 domain (Linux bridges for switches, no loops) in
10.0.0.0/16; hosts are numbered in the order they are added unless given `ip=`.
"""

from __future__ import annotations

import importlib.util
import inspect
import ipaddress
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from mininet.topo import Topo

from testbed.errors import SpecError
from testbed.spec import FibreSpec, check_name

TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topologies"
SUBNET = ipaddress.ip_network("10.0.0.0/16")


class SiteTopo(Topo):
    """A Topo whose hosts carry a role and whose fibre links carry a FibreSpec."""

    def storage(self, name: str, **opts: Any) -> str:
        return self._host(name, "storage", opts)

    def worker(self, name: str, **opts: Any) -> str:
        return self._host(name, "worker", opts)

    def switch(self, name: str, **opts: Any) -> str:
        check_name(name, "switch")
        if name in self.g.node:
            raise SpecError(f"duplicate node {name!r}")
        return self.addSwitch(name, **opts)

    def lan(self, a: str, b: str, **opts: Any) -> str:
        """A plain in-site link (no delay, no shaping)."""
        return self.addLink(a, b, **opts)

    def fibre(self, a: str, b: str, spec: FibreSpec, **opts: Any) -> str:
        """An APN fibre span; A->B is the spec's forward direction."""
        if not isinstance(spec, FibreSpec):
            raise SpecError(f"link {a}-{b}: fibre must be a FibreSpec, got {type(spec).__name__}")
        return self.addLink(a, b, fibre=spec, **opts)

    def _host(self, name: str, role: str, opts: dict[str, Any]) -> str:
        check_name(name, "host")
        if name in self.g.node:
            raise SpecError(f"duplicate node {name!r}")
        if "ip" not in opts:
            index = len(self.hosts()) + 1
            opts["ip"] = f"{SUBNET.network_address + index}/{SUBNET.prefixlen}"
        return self.addHost(name, role=role, **opts)


@dataclass(frozen=True)
class TopologyEntry:
    name: str
    cls: type
    path: Path
    doc: str
    params: Mapping[str, inspect.Parameter]


def _load_file(path: Path) -> dict[str, type]:
    mod_name = f"testbed_topologies_{path.stem.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise SpecError(f"cannot load topology file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return dict(getattr(module, "topos", {}))


@lru_cache(maxsize=None)
def load_topologies(directory: Path = TOPOLOGY_DIR) -> dict[str, TopologyEntry]:
    """Every topology in `directory`, by name."""
    entries: dict[str, TopologyEntry] = {}
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        for name, cls in _load_file(path).items():
            sig = inspect.signature(cls.build)
            params = {k: p for k, p in sig.parameters.items()
                      if k != "self" and p.kind is p.POSITIONAL_OR_KEYWORD}
            doc = inspect.getdoc(cls) or ""
            entries[name] = TopologyEntry(name, cls, path, doc.splitlines()[0] if doc else "",
                                          params)
    return entries


def _coerce(topo: str, key: str, value: Any, default: Any) -> Any:
    if not isinstance(value, str) or isinstance(default, str) or default is None:
        return value
    try:
        if isinstance(default, bool):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise SpecError(f"topology {topo}: parameter {key}={value!r} is not a "
                        f"{type(default).__name__}") from None
    return value


def build(name: str, params: Mapping[str, Any] | None = None) -> SiteTopo:
    """Build topology `name` with `params` (strings are converted to the defaults' types).

    Raises SpecError for an unknown topology or parameter, or invalid values."""
    registry = load_topologies()
    if name not in registry:
        raise SpecError(f"unknown topology {name!r}; known: {', '.join(sorted(registry))}")
    entry = registry[name]
    kwargs: dict[str, Any] = {}
    for key, value in (params or {}).items():
        if key not in entry.params:
            raise SpecError(f"topology {name}: unknown parameter {key!r}; known: "
                            f"{', '.join(entry.params)}")
        kwargs[key] = _coerce(name, key, value, entry.params[key].default)
    try:
        topo = entry.cls(**kwargs)
    except SpecError:
        raise
    except (TypeError, ValueError) as exc:
        raise SpecError(f"topology {name}: {exc}") from None
    topo.name = name  # type: ignore[attr-defined]
    topo.params = {k: p.default for k, p in entry.params.items()} | kwargs  # type: ignore[attr-defined]
    return topo


def parse_params(pairs: list[str]) -> dict[str, str]:
    """["workers=4", "distance_km=60"] -> {"workers": "4", ...}; SpecError on bad syntax."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"parameter {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def interface_name(node: str, port: int) -> str:
    return f"{node}-eth{port}"


def describe(topo: Topo) -> dict[str, Any]:
    """Plain data for printing and meta.json: hosts, switches, links (fibre figures)."""
    hosts = [{"name": h, "role": topo.nodeInfo(h).get("role", "host"),
              "ip": topo.nodeInfo(h).get("ip")} for h in topo.hosts(sort=True)]
    links = []
    for _, _, info in topo.links(sort=True, withInfo=True):
        a, b = info["node1"], info["node2"]
        fibre: FibreSpec | None = info.get("fibre")
        row: dict[str, Any] = {
            "a": a, "b": b,
            "a_intf": interface_name(a, info["port1"]),
            "b_intf": interface_name(b, info["port2"]),
            "kind": "fibre" if fibre else "lan",
        }
        if fibre:
            row.update(fibre.summary())
            rev = fibre.direction(False)
            row["rate_reverse_mbit"] = rev.rate_mbit
            row["loss_reverse_pct"] = rev.loss_pct
        else:
            row.update({"distance_km": 0.0, "delay_ms": 0.0, "rtt_ms": 0.0, "jitter_ms": 0.0,
                        "loss_pct": 0.0, "rate_mbit": None, "limit_pkts": None})
        links.append(row)
    return {
        "name": getattr(topo, "name", type(topo).__name__),
        "params": getattr(topo, "params", {}),
        "hosts": hosts,
        "switches": topo.switches(sort=True),
        "links": links,
    }


def storage_hosts(topo: Topo) -> list[str]:
    return [h for h in topo.hosts(sort=True) if topo.nodeInfo(h).get("role") == "storage"]


def worker_hosts(topo: Topo) -> list[str]:
    return [h for h in topo.hosts(sort=True) if topo.nodeInfo(h).get("role") == "worker"]


def path_fibre(topo: Topo, worker: str) -> list[FibreSpec]:
    """The fibre spans between the (first) storage host and `worker` (for RTT/bounds)."""
    storage = storage_hosts(topo)
    if not storage:
        return []
    graph: dict[str, list[tuple[str, FibreSpec | None]]] = {}
    for a, b, info in topo.links(withInfo=True):
        graph.setdefault(a, []).append((b, info.get("fibre")))
        graph.setdefault(b, []).append((a, info.get("fibre")))
    seen = {storage[0]}
    stack: list[tuple[str, list[FibreSpec]]] = [(storage[0], [])]
    while stack:
        node, spans = stack.pop()
        if node == worker:
            return spans
        for nxt, fibre in graph.get(node, []):
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, spans + ([fibre] if fibre else [])))
    return []
