"""The experiment's view of the knob schema (testbed.schema): the rows experiments may
fix, sweep or search, with the choices of the registries this layer owns (workload
presets, data paths) bound, and keys that address a knob, per fibre link for fibre knobs.

Fibre dimensions are per link: `distance_km` sets every fibre of the topology,
`fibre.*.distance_km` too, `fibre.site_b.distance_km` one named fibre.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from testbed.experiment.plan.datapaths import REGISTRY as DATA_PATHS
from testbed.schema import DIMENSIONS as SCHEMA
from testbed.schema import Dimension, number, show  # noqa: F401 (the layer's vocabulary)
from testbed.workload.presets import NONE, PRESETS

REGISTRIES: dict[str, tuple[str, ...]] = {"presets": (NONE, *PRESETS),
                                          "data paths": tuple(DATA_PATHS)}
DIMENSIONS: tuple[Dimension, ...] = tuple(d.bind(REGISTRIES) for d in SCHEMA if d.exposed)
BY_NAME: dict[str, Dimension] = {d.name: d for d in DIMENSIONS}
FIBRE_DIMS: tuple[Dimension, ...] = tuple(d for d in DIMENSIONS if d.per_link)
SECTIONS: tuple[str, ...] = ("dataset", "workload", "server", "cache", "staging")


def in_section(section: str) -> dict[str, Dimension]:
    """The knobs a plain TOML table holds, by their key there."""
    return {d.section_key: d for d in DIMENSIONS if d.section == section}


def did_you_mean(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    """' (did you mean X?)' for the closest candidate, or ''."""
    hint = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


@dataclass(frozen=True)
class Key:
    """A knob as an experiment names it: a dimension, and for fibre knobs the link it
    addresses (None: every fibre of the topology)."""

    dim: Dimension
    link: str | None = None

    @property
    def text(self) -> str:
        """How the key is written in files and ids ("distance_km",
        "fibre.site_b.distance_km")."""
        return f"fibre.{self.link}.{self.dim.name}" if self.link else self.dim.name

    @property
    def column(self) -> str:
        """Its CSV column ("rate_mbit", "fibre.site_b.rate_mbit")."""
        return f"fibre.{self.link}.{self.dim.csv_column}" if self.link else self.dim.csv_column

    @property
    def label(self) -> str:
        """A plot axis label in words."""
        return f"{self.link} {self.dim.axis_label}" if self.link else self.dim.axis_label


def parse_key(text: Any, links: tuple[str, ...]) -> Key:
    """A knob's name as written (`nconnect`, `fibre.*.loss_pct`, `fibre.site_b.rate`) ->
    Key. Raises ValueError with a "did you mean" for unknown knobs or links."""
    if not isinstance(text, str):
        raise ValueError(f"a knob name must be text, got {show(text)}")
    if text.startswith("fibre."):
        _, _, rest = text.partition(".")
        link, _, name = rest.rpartition(".")
        dim = BY_NAME.get(name)
        if not link or dim is None or not dim.per_link:
            names = [f"fibre.{l}.{d.name}" for l in ("*", *links) for d in FIBRE_DIMS]
            raise ValueError(f"unknown knob {text!r}{did_you_mean(text, names)}")
        if link != "*" and link not in links:
            known = ", ".join(links) or "none"
            raise ValueError(f"unknown fibre {link!r} in {text!r}{did_you_mean(link, links)}; "
                             f"this topology's fibres: {known}")
        return Key(dim, None if link == "*" else link)
    if text not in BY_NAME:
        names = list(BY_NAME) + [f"fibre.{l}.{d.name}" for l in links for d in FIBRE_DIMS]
        raise ValueError(f"unknown knob {text!r}{did_you_mean(text, names)}")
    return Key(BY_NAME[text])
