"""Topologies: Mininet-compatible descriptions built from specs. Building one runs nothing.

SiteTopo        a mininet.topo.Topo with helpers for the testbed's roles: storage hosts,
                GPU workers, switches, LAN links and fibre links (a FibreSpec on the link).
load_topologies the registry: every `topos = {...}` in the project's topologies/*.py files
                (the same files `mn --custom` reads).
build           name + parameters (text from the CLI or values from TOML) -> a Topo, with
                parameters checked against the topology's build() signature.
describe        a Topo -> plain data (nodes, addresses, links with delay/rate/limit) for
                `testbed topo show` and for results' meta.json.

Fibre links have names ("wan" in apn, "site_a"/"site_b" in two-sites), by which
experiments address them (`fibre.site_b.distance_km`); fibres() lists them, set_fibre()
and set_mtu() change a built (not yet running) topology, path_fibres() and site_of() tell
which spans lie between the storage host and a worker. GPU hosts: a site's workers in
groups of a host profile's GPUs per host (host_sizes); a worker's access link (its one
link, to its site's switch) carries its share of its host's NIC (access_link).

Addressing: every topology is one layer-2 domain (Linux bridges for switches, no loops) in
10.0.0.0/16; hosts are numbered in the order they are added unless given `ip=`.
"""

from __future__ import annotations

import importlib.util
import inspect
import ipaddress
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

from mininet.topo import Topo

from testbed import schema
from testbed.errors import SpecError
from testbed.spec import FibreSpec, check_name, parse_text

TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topologies"
SUBNET = ipaddress.ip_network("10.0.0.0/16")
MAX_HOSTS = SUBNET.num_addresses - 2  # network and broadcast addresses excluded
FIBRE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
LOCAL_SITE = "local"  # site_of() for a worker with no fibre between it and the storage


class SiteTopo(Topo):
    """A Topo whose hosts carry a role and whose fibre links carry a FibreSpec.

    Parameters named after a knob (workers, mtu, distance_km, rate, loss_pct, ...) are
    checked against the knob's schema row before build() runs, however the topology is
    built (testbed.topology.build, `mn --custom`), so a topology file declares no bounds."""

    def __init__(self, *args: Any, **params: Any) -> None:
        for key, value in params.items():
            if key in schema.ROWS and schema.ROWS[key].exposed:
                schema.check(key, value, key)
        super().__init__(*args, **params)

    def storage(self, name: str, **opts: Any) -> str:
        """Add a storage host (it runs nfsd); SpecError for a bad or duplicate name."""
        return self._host(name, "storage", opts)

    def worker(self, name: str, **opts: Any) -> str:
        """Add a GPU worker host; SpecError for a bad or duplicate name."""
        return self._host(name, "worker", opts)

    def switch(self, name: str, **opts: Any) -> str:
        """Add a switch (a Linux bridge in its own namespace)."""
        check_name(name, "switch")
        if name in self.g.node:
            raise SpecError(f"duplicate node {name!r}")
        return self.addSwitch(name, **opts)

    def lan(self, a: str, b: str, **opts: Any) -> str:
        """A plain in-site link (no delay, no shaping)."""
        return self.addLink(a, b, **opts)

    def fibre(self, a: str, b: str, spec: FibreSpec, name: str | None = None,
              **opts: Any) -> str:
        """An APN fibre span named `name` (default "<a>_<b>"); A->B is the spec's forward
        direction."""
        if not isinstance(spec, FibreSpec):
            raise SpecError(f"link {a}-{b}: fibre must be a FibreSpec, got {type(spec).__name__}")
        name = name or f"{a}_{b}"
        if not FIBRE_NAME_RE.match(name):
            raise SpecError(f"fibre name {name!r}: lower-case letters, digits and _, "
                            "starting with a letter")
        if name in fibres(self):
            raise SpecError(f"duplicate fibre name {name!r}")
        return self.addLink(a, b, fibre=spec, fibre_name=name, **opts)

    def _host(self, name: str, role: str, opts: dict[str, Any]) -> str:
        check_name(name, "host")
        if name in self.g.node:
            raise SpecError(f"duplicate node {name!r}")
        if "ip" not in opts:
            index = len(self.hosts(sort=False)) + 1  # sorting each time: quadratic
            if index > MAX_HOSTS:
                raise SpecError(f"host {name}: more than {MAX_HOSTS} hosts do not fit the "
                                f"testbed's subnet {SUBNET}")
            opts["ip"] = f"{SUBNET.network_address + index}/{SUBNET.prefixlen}"
        return self.addHost(name, role=role, **opts)


@dataclass(frozen=True)
class TopologyEntry:
    """A registered topology: its class, file, first doc line and build() parameters."""
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
    """A parameter given as text -> the type of its default (strict ASCII numbers)."""
    if not isinstance(value, str) or isinstance(default, str) or default is None:
        return value
    for kind in (bool, int, float):  # bool before int: bool is an int subclass
        if isinstance(default, kind):
            try:
                return parse_text(value, kind)
            except ValueError as exc:
                raise SpecError(f"topology {topo}: parameter {key}={value!r}: {exc}") from None
    return value


# The build() parameters experiments set through a knob: parameter -> knob. A point's
# topology is built from its values of those its topology takes (params_of); the
# cluster's `gpus` is the size of its GPU hosts, the host profile's host_gpus, so that
# host_sizes groups each server's workers into one host.
PARAM_KNOBS: dict[str, str] = {"workers": "workers", "servers": "servers",
                               "fibres": "fibres", "gpus": "host_gpus"}
# The parameters that decide which fibre links exist: one value per experiment (fibre
# knobs address the links by name).
LINK_PARAMS: tuple[str, ...] = ("fibres",)


def knob_params(name: str) -> dict[str, str]:
    """The parameters of topology `name` that a knob sets: parameter -> knob
    (SpecError for an unknown topology)."""
    registry = load_topologies()
    if name not in registry:
        raise SpecError(f"unknown topology {name!r}; known: {', '.join(sorted(registry))}")
    return {p: k for p, k in PARAM_KNOBS.items() if p in registry[name].params}


def params_of(name: str, value: Callable[[str], Any]) -> dict[str, Any]:
    """The build() parameters of topology `name` from knob values (`value(knob)`)."""
    return {p: value(k) for p, k in knob_params(name).items()}


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
        key, value = key.strip(), value.strip()
        if out.get(key, value) != value:
            raise SpecError(f"parameter {key!r}: given twice, as {out[key]!r} and {value!r}:"
                            " give it once")
        out[key] = value
    return out


def interface_name(node: str, port: int) -> str:
    """The interface of `node` on its port `port` (Mininet's naming)."""
    return f"{node}-eth{port}"


def fibres(topo: Topo) -> dict[str, tuple[str, str, FibreSpec]]:
    """Every fibre link of a topology: name -> (a, b, spec), in the order they were added."""
    out: dict[str, tuple[str, str, FibreSpec]] = {}
    for a, b, info in topo.links(withInfo=True):
        if info.get("fibre") is not None:
            name = info.get("fibre_name") or f"{info['node1']}_{info['node2']}"
            out[name] = (info["node1"], info["node2"], info["fibre"])
    return out


def set_fibre(topo: Topo, name: str, spec: FibreSpec) -> None:
    """Replace the spec of fibre `name` in a topology that is not running yet."""
    for _, _, info in topo.links(withInfo=True):
        if info.get("fibre") is not None and \
                (info.get("fibre_name") or f"{info['node1']}_{info['node2']}") == name:
            info["fibre"] = spec
            return
    raise SpecError(f"topology has no fibre named {name!r}; known: {', '.join(fibres(topo))}")


def set_mtu(topo: Topo, mtu: int) -> None:
    """Give every link of a topology that is not running yet the same MTU (fibres and LAN
    links alike: a path's MTU is its smallest link's)."""
    for _, _, info in topo.links(withInfo=True):
        info["mtu"] = mtu
        if info.get("fibre") is not None:
            info["fibre"] = info["fibre"].replace(mtu=mtu)


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
            row["name"] = info.get("fibre_name") or f"{a}_{b}"
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
    """The hosts with role "storage" (the first one serves NFS), sorted."""
    return [h for h in topo.hosts(sort=True) if topo.nodeInfo(h).get("role") == "storage"]


def worker_hosts(topo: Topo) -> list[str]:
    """The hosts with role "worker" (GPU servers), sorted."""
    return [h for h in topo.hosts(sort=True) if topo.nodeInfo(h).get("role") == "worker"]


def fibre_paths(topo: Topo) -> dict[str, list[tuple[str, FibreSpec]]]:
    """Every node's named fibre spans from the (first) storage host, storage side first,
    found in one walk of the links (a per-worker walk made a point's fair shares cost
    workers squared: 1,024 workers took 30 s to check)."""
    storage = storage_hosts(topo)
    if not storage:
        return {}
    graph: dict[str, list[tuple[str, tuple[str, FibreSpec] | None]]] = {}
    for _, _, info in topo.links(withInfo=True):
        a, b, fibre = info["node1"], info["node2"], info.get("fibre")
        span = (info.get("fibre_name") or f"{a}_{b}", fibre) if fibre is not None else None
        graph.setdefault(a, []).append((b, span))
        graph.setdefault(b, []).append((a, span))
    paths: dict[str, list[tuple[str, FibreSpec]]] = {storage[0]: []}
    stack = [storage[0]]
    while stack:
        node = stack.pop()
        for nxt, span in graph.get(node, []):
            if nxt not in paths:
                paths[nxt] = paths[node] + ([span] if span else [])
                stack.append(nxt)
    return paths


def path_fibres(topo: Topo, worker: str) -> list[tuple[str, FibreSpec]]:
    """The named fibre spans between the (first) storage host and `worker`, storage side
    first (for the path's RTT, rate, loss and bounds)."""
    return fibre_paths(topo).get(worker, [])


def path_fibre(topo: Topo, worker: str) -> list[FibreSpec]:
    """The fibre specs between the (first) storage host and `worker` (see path_fibres)."""
    return [spec for _, spec in path_fibres(topo, worker)]


def site_of(topo: Topo, worker: str) -> str:
    """The worker's site: the name of the last fibre span on its path from the storage
    host ("local" when there is none)."""
    spans = path_fibres(topo, worker)
    return spans[-1][0] if spans else LOCAL_SITE


def _natural(name: str) -> tuple[int, str]:
    """A host name's place in natural order (w2 before w10)."""
    return len(name), name


def host_sizes(topo: Topo, gpus: int) -> dict[str, int]:
    """Each worker's count of workers on its GPU host: a site's workers, in natural
    order, fill hosts of `gpus` GPUs each (the last one takes what is left)."""
    sites: dict[str, list[str]] = {}
    paths = fibre_paths(topo)  # one walk for every worker (site_of walks per call)
    for w in worker_hosts(topo):
        spans = paths.get(w, [])
        sites.setdefault(spans[-1][0] if spans else LOCAL_SITE, []).append(w)
    out: dict[str, int] = {}
    for workers in sites.values():
        workers.sort(key=_natural)
        for i in range(0, len(workers), gpus):
            group = workers[i:i + gpus]
            out.update({w: len(group) for w in group})
    return out


def access_link(topo: Topo, host: str) -> tuple[str, str, str]:
    """A host's access link: (its interface, the node at the other end, that node's
    interface), the first link of the host that is not a fibre span. SpecError when
    the host has none (a storage host whose only link is a fibre)."""
    for _, _, info in topo.links(sort=True, withInfo=True):
        if info.get("fibre") is not None:
            continue
        for me, port, peer, peer_port in ((info["node1"], info["port1"], info["node2"],
                                           info["port2"]),
                                          (info["node2"], info["port2"], info["node1"],
                                           info["port1"])):
            if me == host:
                return interface_name(me, port), peer, interface_name(peer, peer_port)
    raise SpecError(f"host {host!r} has no access link (only fibre)")
