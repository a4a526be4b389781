"""A point's plan turned into what the run's helpers take, once the fabric is built (its namespaces and the marker's
pins are named by the run's prefix): the queue sampler's ports, the kernel queue telemetry's configuration and the
backlogged senders whose TCP state is sampled. Each port's leaf handle and marker come from its ``PortPlan``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from testbed.telemetry.bpfmarks import marks_map_path
from testbed.telemetry.ports import PortRef, SenderRef
from testbed.telemetry.qslots import QslotsConfig
from testbed.telemetry.qtelem import QtPort
from traffic.iperf import bulk_senders

if TYPE_CHECKING:
    from testbed.fabric.build import Fabric


def sampler_ports(fab: Fabric) -> list[PortRef]:
    """The queue sampler's ports: each port's leaf handle (with classes: HTB's root, which holds them all) and the
    eBPF marker's counters where it marks."""
    refs = []
    for p in fab.ports():
        plan = fab.plan.port(p.name)
        ns = fab.netns(p.node)
        mm = marks_map_path(fab.prefix, ns, p.dev) if plan.marking == "bpf" else None
        refs.append(PortRef(ns, p.dev, leaf=plan.sampler_leaf, node=p.node, marks_map=mm))
    return refs


def qslots_config(fab: Fabric, slot_ns: int) -> QslotsConfig:
    """The kernel queue telemetry's ports (kernel RED's marks are told apart where the kernel marks)."""
    ports = tuple(
        QtPort(
            fab.netns(p.node),
            p.dev,
            p.link.rate_bps,
            p.node,
            kernel_red=fab.plan.port(p.name).marking == "kernel",
            mtu=p.link.mtu,
        )
        for p in fab.ports()
    )
    return QslotsConfig(ports, slot_ns=slot_ns)


def sender_refs(fab: Fabric, workload: Sequence[Any]) -> list[SenderRef]:
    """The namespaces of the workload's backlogged iperf3 clients and their servers' ports, for senders.csv."""
    by_src: dict[str, list[int]] = {}
    for src, port in bulk_senders(workload):
        by_src.setdefault(src, []).append(port)
    return [SenderRef(fab.hosts[h].netns, h, tuple(ports)) for h, ports in by_src.items() if h in fab.hosts]
