"""Typed spec of a whole fabric: topology shape, link classes, per-port overrides, ECMP, transport.

Scenario files give it as the ``fabric:`` section::

    fabric:
      topology: spine-leaf          # or fat-tree (then `k: 4`)
      spines: 2
      leaves: 4
      hosts_per_leaf: 2
      oversubscription: "2:1"       # optional: derives the leaf-spine rate from the host rate
      host_link:   {rate: 100Mbit, buffer: 300KB, mtu: 9000}
      fabric_link: {rate: 100Mbit}  # inherits every key it does not set from host_link
      overrides:
        - {port: "l1->l1h1", buffer: 100KB, ecn: {mode: step, k: 30KB}}   # one egress queue
        - {link: "l2-s1", rate: 50Mbit}                                     # both directions of a link
      ecmp: {hash: l4, seed: 7}
      transport: {cc: cubic, ecn: true, gso_max_segs: 1}
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal, cast

from testbed.spec.fields import SpecError, check_keys, integer, sub
from testbed.spec.link import LINK_KEYS, EcmpSpec, LinkSpec, TransportSpec

# The most nodes (network namespaces, each with its own shell) the harness builds: a build costs about 37 ms per
# node here (docs/bench.md), so 1,000 take about 40 s; a fat-tree of k = 16 is 1,344. The preflight
# (testbed.plan.bounds) also checks the memory they need on this machine.
MAX_NODES = 1000

TOPOLOGY_KEYS = {
    "topology",
    "spines",
    "leaves",
    "hosts_per_leaf",
    "k",
    "oversubscription",
    "host_link",
    "fabric_link",
    "overrides",
    "ecmp",
    "transport",
}


@dataclass(frozen=True)
class Override:
    """Settings for one egress port (``port: "a->b"``) or both directions of a link (``link: "a-b"``)."""

    selector: str
    src: str
    dst: str
    both: bool
    values: tuple[tuple[str, Any], ...]

    def matches(self, node: str, peer: str) -> bool:
        if (node, peer) == (self.src, self.dst):
            return True
        return self.both and (node, peer) == (self.dst, self.src)


@dataclass(frozen=True)
class FabricSpec:
    topology: Literal["spine-leaf", "fat-tree"] = "spine-leaf"
    spines: int = 2
    leaves: int = 4
    hosts_per_leaf: int = 2
    k: int = 4
    host_link: LinkSpec = field(default_factory=LinkSpec)
    fabric_link: LinkSpec = field(default_factory=LinkSpec)
    overrides: tuple[Override, ...] = ()
    ecmp: EcmpSpec = field(default_factory=EcmpSpec)
    transport: TransportSpec = field(default_factory=TransportSpec)

    @property
    def mtu(self) -> int:
        return self.host_link.mtu

    @property
    def node_count(self) -> int:
        """Switches and hosts: one network namespace each."""
        if self.topology == "fat-tree":
            return 5 * self.k * self.k // 4 + self.k**3 // 4
        return self.spines + self.leaves * (1 + self.hosts_per_leaf)

    @property
    def oversubscription(self) -> Fraction:
        """Host-facing over uplink capacity of one leaf (edge switch for a fat-tree)."""
        if self.topology == "fat-tree":
            return Fraction(self.host_link.rate_bps, self.fabric_link.rate_bps)
        down = self.hosts_per_leaf * self.host_link.rate_bps
        up = self.spines * self.fabric_link.rate_bps
        return Fraction(down, up)

    def link_for(self, node: str, peer: str, base: LinkSpec) -> LinkSpec:
        """The spec of the egress port on ``node`` towards ``peer`` (overrides applied in order)."""
        spec = base
        for ov in self.overrides:
            if ov.matches(node, peer):
                spec = LinkSpec.from_dict(dict(ov.values), f"fabric.overrides[{ov.selector}]", base=spec)
        return spec

    @classmethod
    def from_dict(cls, data: Any, path: str = "fabric") -> FabricSpec:
        check_keys(data, TOPOLOGY_KEYS, path)
        topo = data.get("topology", "spine-leaf")
        if topo not in ("spine-leaf", "fat-tree"):
            raise SpecError(sub(path, "topology"), f"must be spine-leaf or fat-tree, got {topo!r}")
        spec = cls(topology=cast(Literal["spine-leaf", "fat-tree"], topo))
        if topo == "spine-leaf":
            for key in ("k",):
                if key in data:
                    raise SpecError(sub(path, key), "only meaningful for topology fat-tree")
            spec = replace(
                spec,
                spines=integer(sub(path, "spines"), data.get("spines", 2), 1, 64),
                leaves=integer(sub(path, "leaves"), data.get("leaves", 4), 1, 254),
                hosts_per_leaf=integer(sub(path, "hosts_per_leaf"), data.get("hosts_per_leaf", 2), 1, 254),
            )
        else:
            for key in ("spines", "leaves", "hosts_per_leaf"):
                if key in data:
                    raise SpecError(sub(path, key), "only meaningful for topology spine-leaf (a fat-tree is set by k)")
            k = integer(sub(path, "k"), data.get("k", 4), 2, 16)
            if k % 2:
                raise SpecError(sub(path, "k"), f"a k-ary fat-tree needs an even k, got {k}")
            spec = replace(spec, k=k)
        if spec.node_count > MAX_NODES:
            shape = f"k = {spec.k}" if topo == "fat-tree" else f"{spec.spines} x {spec.leaves} x {spec.hosts_per_leaf}"
            raise SpecError(
                path, f"{shape} is {spec.node_count} nodes (one namespace each); the harness builds at most {MAX_NODES}"
            )

        host = LinkSpec.from_dict(data.get("host_link", {}), sub(path, "host_link"))
        fab_raw = data.get("fabric_link", {}) or {}
        check_keys(fab_raw, LINK_KEYS, sub(path, "fabric_link"))  # before dict(): a list or str is a SpecError
        fab_data = dict(fab_raw)
        if "mtu" in fab_data and fab_data["mtu"] != host.mtu:
            raise SpecError(sub(path, "fabric_link.mtu"), f"every link must share one MTU (host_link has {host.mtu})")
        ratio = data.get("oversubscription")
        if ratio is not None:
            over = parse_ratio(ratio, sub(path, "oversubscription"))
            if topo == "fat-tree":
                raise SpecError(
                    sub(path, "oversubscription"),
                    "a fat-tree is non-blocking by construction; set fabric_link.rate instead",
                )
            derived = Fraction(spec.hosts_per_leaf * host.rate_bps) / (spec.spines * over)
            if "rate" in fab_data:
                given = LinkSpec.from_dict({"rate": fab_data["rate"]}, sub(path, "fabric_link")).rate_bps
                if abs(given - float(derived)) > 0.01 * float(derived):
                    raise SpecError(
                        sub(path, "oversubscription"),
                        f"{ratio} with {spec.hosts_per_leaf} hosts at {host.rate_bps} bit/s and {spec.spines} spines "
                        f"needs uplinks of {float(derived):.0f} bit/s, but fabric_link.rate is {given} bit/s: give one of the two",
                    )
            fab_data["rate"] = f"{int(round(derived))}bit"
        fabric = LinkSpec.from_dict(fab_data, sub(path, "fabric_link"), base=host)

        raw_overrides = data.get("overrides", []) or []
        if not isinstance(raw_overrides, list):  # a mapping or string would be iterated key by key / char by char
            raise SpecError(sub(path, "overrides"), f"expected a list of overrides, got {type(raw_overrides).__name__}")
        overrides = tuple(_parse_override(o, f"{path}.overrides[{i}]") for i, o in enumerate(raw_overrides))
        spec = replace(
            spec,
            host_link=host,
            fabric_link=fabric,
            overrides=overrides,
            ecmp=EcmpSpec.from_dict(data.get("ecmp", {}) or {}, sub(path, "ecmp")),
            transport=TransportSpec.from_dict(data.get("transport", {}) or {}, sub(path, "transport")),
        )
        for i, ov in enumerate(overrides):
            values = dict(ov.values)
            if "mtu" in values and values["mtu"] != host.mtu:
                raise SpecError(f"{path}.overrides[{i}].mtu", f"every link must share one MTU ({host.mtu})")
            LinkSpec.from_dict(values, f"{path}.overrides[{i}]", base=host)  # validate values early
        return spec


def parse_ratio(value: Any, path: str) -> Fraction:
    """``"3:1"``, ``3`` or ``1.5`` -> Fraction(3); must be >= 1 (1 = non-blocking)."""
    if isinstance(value, bool):
        raise SpecError(path, f"{value!r} is not a ratio")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise SpecError(path, f"{value!r} is not a ratio")
        ratio = Fraction(value).limit_denominator(1000)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*:\s*\d+(\.\d+)?\s*", value):
        a, b = (Fraction(x.strip()).limit_denominator(1000) for x in value.split(":"))
        if b == 0:
            raise SpecError(path, "the ratio's second number must not be 0")
        ratio = a / b
    else:
        raise SpecError(path, f"{value!r} is not a ratio like '3:1'")
    if ratio < 1:
        raise SpecError(
            path, f"oversubscription below 1:1 ({value}) means uplinks faster than hosts can use; give fabric_link.rate"
        )
    return ratio


def _parse_override(data: Any, path: str) -> Override:
    check_keys(data, LINK_KEYS | {"port", "link"}, path)
    if ("port" in data) == ("link" in data):
        raise SpecError(path, "give exactly one of port: 'a->b' (one egress queue) or link: 'a-b' (both directions)")
    if "port" in data:
        sel = str(data["port"])
        m = re.fullmatch(r"\s*([\w]+)\s*->\s*([\w]+)\s*", sel)
        if not m:
            raise SpecError(sub(path, "port"), f"{sel!r} is not 'node->peer'")
        both = False
    else:
        sel = str(data["link"])
        m = re.fullmatch(r"\s*([\w]+)\s*-\s*([\w]+)\s*", sel)
        if not m:
            raise SpecError(sub(path, "link"), f"{sel!r} is not 'node-peer'")
        both = True
    values = tuple(sorted((k, v) for k, v in data.items() if k not in ("port", "link")))
    if not values:
        raise SpecError(path, "an override must set at least one of " + ", ".join(sorted(LINK_KEYS)))
    return Override(sel, m.group(1), m.group(2), both, values)
