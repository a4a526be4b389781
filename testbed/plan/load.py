"""A workload's predicted CPU load (``estimate``: forwarding plus the queue sampler, over its timeline) and the
warnings for one this machine probably cannot emulate faithfully (``preflight``).

The load is the time-weighted mean over the intervals whose length is known (a run's headroom target is its mean
CPU over the traffic window); while an open-ended job runs, its interval's load counts in full. ``Estimate.peak``
is the busiest interval.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from testbed.calibrate.model import FALLBACK, CostModel
from testbed.plan.flows import flow_paths
from testbed.plan.model import (
    forwarding_core_s,
    packets,
    qtelem_core_s,
    sampler_core_s,
    sampler_rows_per_s,
)
from testbed.plan.timeline import intervals
from testbed.spec.fabric import FabricSpec
from testbed.spec.topology import Topology

if TYPE_CHECKING:
    from testbed.host.capabilities import Capabilities

LOAD_WARN = 0.8  # forwarding share of all cores above which the emulation is likely CPU-bound


@dataclass(frozen=True)
class Estimate:
    flows: int
    offered_bps: float
    pps: float  # data + ACK packets per second, summed over flows
    crossings_per_s: float  # packets x veths crossed
    load: float  # forwarding: estimated share of all cores
    load_mtu9000: float  # forwarding at MTU 9000
    cores: int
    mtu: int
    sampler_load: float = 0.0  # the queue telemetry's share of all cores: the poller, and the kernel's (bpf_queues)
    sampler_rows_per_s: float = 0.0
    namespaces: int = 0
    queue_hz: float = 0.0
    calibrated: bool = False
    peak: float = 0.0  # total load of the busiest interval of the workload (``estimate``)
    peak_load: float = 0.0  # its forwarding part

    @property
    def total(self) -> float:
        """Predicted share of the whole machine: forwarding plus the queue sampler."""
        return self.load + self.sampler_load

    def describe(self) -> dict[str, Any]:
        return {
            "flows": self.flows,
            "offered_bps": round(self.offered_bps),
            "pps": round(self.pps),
            "crossings_per_s": round(self.crossings_per_s),
            "forwarding_load": round(self.load, 4),
            "sampler_load": round(self.sampler_load, 4),
            "total_load": round(self.total, 4),
            "peak_load": round(max(self.peak, self.total), 4),
            "sampler_rows_per_s": round(self.sampler_rows_per_s),
            "namespaces": self.namespaces,
            "queue_hz": self.queue_hz,
            "cores": self.cores,
            "mtu": self.mtu,
        }


def _cores(caps: Capabilities | None) -> int:
    return int((caps.cpus if caps is not None else None) or os.cpu_count() or 1)


def _phase_estimate(
    spec: FabricSpec,
    topo: Topology,
    jobs: list[Any],
    cores: int,
    model: CostModel,
    telemetry: Any,
    link_bps: float,
) -> Estimate:
    mtu = spec.mtu
    paths = flow_paths(spec, topo, jobs)
    offered = pps = cross = 0.0
    for p in paths:
        rate = p.rate(link_bps)
        data, acks = packets(rate, mtu)
        offered += rate
        pps += data + acks
        cross += (data + acks) * p.veths
    fwd = forwarding_core_s(paths, link_bps, mtu, model)
    fwd9000 = forwarding_core_s(paths, link_bps, 9000, model)
    namespaces = len(topo.nodes)
    queue_hz = float(getattr(telemetry, "queue_hz", 0.0) or 0.0) if telemetry is not None else 0.0
    link_hz = float(getattr(telemetry, "link_hz", 0.0) or 0.0) if telemetry is not None else 0.0
    rows = sampler_rows_per_s(paths, link_bps, mtu, len(topo.ports()), queue_hz, link_hz) if queue_hz > 0 else 0.0
    samp = sampler_core_s(namespaces, rows, queue_hz, model)
    if getattr(telemetry, "bpf_queues", False):
        samp += qtelem_core_s(cross)
    return Estimate(
        len(paths),
        offered,
        pps,
        cross,
        fwd / cores,
        fwd9000 / cores,
        cores,
        mtu,
        sampler_load=samp / cores,
        sampler_rows_per_s=rows,
        namespaces=namespaces,
        queue_hz=queue_hz,
        calibrated=model.calibrated,
    )


_MEANS = ("offered_bps", "pps", "crossings_per_s", "load", "load_mtu9000", "sampler_load", "sampler_rows_per_s")


def _mean(parts: list[tuple[float, Estimate]]) -> Estimate:
    """The time-weighted mean of estimates over finite intervals (fields that do not add up: the busiest's)."""
    total = sum(dt for dt, _ in parts)
    busiest = max((e for _, e in parts), key=lambda e: (e.total, e.flows))
    if total <= 0:
        return busiest
    return replace(busiest, **{k: sum(dt * getattr(e, k) for dt, e in parts) / total for k in _MEANS})


def estimate(
    spec: FabricSpec,
    workload: Iterable[Any],
    caps: Capabilities | None = None,
    model: CostModel = FALLBACK,
    telemetry: Any = None,
    link_bps: float | None = None,
    topo: Topology | None = None,
) -> Estimate:
    """The workload's load (``telemetry`` given: the queue sampler's too), as the mean over its timeline (the
    headroom target is the mean over a run's traffic window), with its busiest interval in ``peak``.

    Where the timeline is known (iperf jobs' ``start_after`` and ``duration``) the load is time-weighted over it;
    an open-ended job (collectives, incast, ...) may run for any time, so while one runs its interval's load counts
    at least as much as the mean (the larger of the two is taken). ``link_bps`` replaces the host-link rate (what
    the budget's rate solve varies); ``topo``: the spec's topology, drawn already (its structure: the hosts and the
    routers between them)."""
    topo = Topology(spec) if topo is None else topo
    cores = _cores(caps)
    link = float(spec.host_link.rate_bps if link_bps is None else link_bps)
    parts = []
    for dt, cands in intervals(workload, topo):
        ests = [_phase_estimate(spec, topo, jobs, cores, model, telemetry, link) for jobs in cands]
        parts.append((dt, max(ests, key=lambda e: (e.total, e.flows))))
    busiest = max((e for _, e in parts), key=lambda e: (e.total, e.flows))
    finite = [(dt, e) for dt, e in parts if dt != math.inf]
    tail = [e for dt, e in parts if dt == math.inf]
    mean = _mean(finite) if finite else busiest
    if tail and tail[0].total > mean.total:
        mean = tail[0]
    return replace(mean, flows=busiest.flows, peak=busiest.total, peak_load=busiest.load)


def preflight(
    spec: FabricSpec,
    workload: Iterable[Any],
    caps: Capabilities | None = None,
    model: CostModel = FALLBACK,
    topo: Topology | None = None,
) -> list[str]:
    """Warnings for a scenario whose offered load this machine probably cannot emulate faithfully."""
    e = estimate(spec, workload, caps, model, topo=topo)
    load = max(e.load, e.peak_load)  # the busiest interval: that is where the emulation would fall behind
    if load <= LOAD_WARN:
        return []
    factor = load / LOAD_WARN
    msg = (
        f"offered load: {e.flows} flows, {e.offered_bps / 1e6:.0f} Mbit/s, ~{e.pps / 1e3:.0f} kpps at MTU {e.mtu} "
        f"({e.crossings_per_s / 1e3:.0f}k veth crossings/s) needs about {load:.0%} of {e.cores} cores "
        f"(above {LOAD_WARN:.0%} the emulation is CPU-bound and the run will likely fail its fidelity checks)"
    )
    fixes = [f"scale rates down by at least {factor:.1f}x (fabric.scale: {max(2, round(factor + 0.5))})"]
    if e.mtu < 9000:
        fixes.append(
            f"use jumbo frames (host_link.mtu: 9000: about {e.load_mtu9000:.0%} of the cores"
            + (", which fits)" if e.load_mtu9000 <= LOAD_WARN else ", still too much on its own)")
        )
    return [msg, "suggestion: " + "; or ".join(fixes)]
