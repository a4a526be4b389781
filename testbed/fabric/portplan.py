"""What each egress port of a fabric gets, decided once before anything is built (pure types): its leaf qdisc, who
marks ECN on it (kernel RED, the eBPF marker, or nobody) and which of its traffic classes the marker marks, the tc
handle the queue sampler reads, its part in PFC and the load balancing at its node.

``testbed.fabric.checks.plan_fabric`` makes these decisions (the only place the marking is chosen); ``Fabric``
applies them, and the sampler, the marker and the PFC controller take their ports from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from testbed.fabric.pfc import PfcPlan
from testbed.spec.classes import TrafficClass
from testbed.spec.topology import Topology

Impl = str  # "kernel" | "bpf" (testbed.ecn.choose_impl), or "off" for a port nobody marks


@dataclass(frozen=True)
class PortPlan:
    """One egress port's decisions.

    ``leaf``: its queue's qdisc (``bfifo``/``pfifo`` drop-tail, ``red`` for kernel marking, ``htb classes`` for a
    port with traffic classes: one leaf per class). ``marking``: who marks it (``off``, ``kernel``, ``bpf``; a
    port with classes: ``bpf`` when the marker marks any of its classes, ``kernel`` when only RED leaves do).
    ``class_marking``: each class's (name, impl). ``marker_classes``: the classes the eBPF marker marks, with their
    HTB minors. ``sampler_leaf``: the tc handle whose backlog the queue sampler reads. ``pfc``: ``watched`` (a
    router's lossless queue), ``paused`` (an upstream port that pauses for one), ``watched and paused``, or
    ``none``. ``lb``: the load balancing that spreads traffic over it (``ecmp.mode``) when it is one of its node's
    equal-cost next hops, else ``single path``."""

    name: str
    node: str
    dev: str
    tier: str  # host | fabric
    leaf: str
    marking: Impl
    class_marking: tuple[tuple[str, Impl], ...]
    marker_classes: tuple[tuple[TrafficClass, int], ...]
    sampler_leaf: str
    pfc: str
    lb: str

    @property
    def marked(self) -> bool:
        """Whether the run records this port under the manifest's ``marking.ports``."""
        return self.marking != "off"

    def class_impl(self, name: str) -> Impl:
        return dict(self.class_marking).get(name, "off")


@dataclass(frozen=True)
class FabricPlan:
    """A fabric's topology (drawn once) and its ports' decisions, in the topology's port order."""

    topo: Topology = field(repr=False)
    ports: tuple[PortPlan, ...]
    pfc: PfcPlan

    def port(self, name: str) -> PortPlan:
        return self._by_name[name]

    @cached_property
    def _by_name(self) -> Mapping[str, PortPlan]:
        return {p.name: p for p in self.ports}

    def marking(self) -> dict[str, Any]:
        """The manifest's ``marking`` before the congestion control is prepared: each marked port's impl (the
        ports without classes first, then those with classes, as the record has always listed them) and the impls
        used; empty when nothing marks."""
        plain = {p.name: p.marking for p in self.ports if p.marked and not p.class_marking}
        classed = {p.name: p.marking for p in self.ports if p.marked and p.class_marking}
        impls = {**plain, **classed}
        return {"ports": impls, "impls": sorted(set(impls.values()))} if impls else {}
