"""Pre-flight estimate: will this machine keep up with a scenario's offered load? (pure; before anything is built)

``preflight(fabric_spec, workload, caps) -> list[str]`` (warnings; empty = fits). ``estimate(...)`` gives the
numbers. Model: every flow's rate is capped by its job (iperf ``rate``) and by its share of its sender's and
receiver's host links; it sends rate / (8 x (MTU + 14)) data packets per second plus one ACK per two, and every
packet costs the CPU once per veth it crosses (routers on its path + 1) with a fixed part and a per-byte part.
Jobs are assumed to overlap (the worst case); oversubscribed uplinks are not modelled (it overestimates then).

The cost coefficients are fitted to the 8-flow ring on a 2x4x2 fabric (``python3 -m testbed bench``, figure a):
measured CPU (worst flow / payload rate) vs this model: MTU 1500 25 Mbit/s 53% (0.97) vs 42%; 50 Mbit/s 79% (0.98;
machine.md: 85%, 0.94) vs 83%; 100 Mbit/s 80-100% (0.80, CPU-bound) vs 166%; MTU 9000 100 Mbit/s 23% (1.00) vs 33%;
200 Mbit/s 52% (0.99) vs 66%. So the model is within about 0.15 below saturation, and 50 Mbit/s at MTU 1500 is the
border (faithful in 2 of 3 measurements).
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from testbed.fabricspec import FabricSpec
from testbed.topology import HostInfo, Topology

ETH_HEADER = 14
ACKS_PER_DATA = 0.5  # delayed ACKs: one per two segments (GRO is off on every port)
COST_PER_PACKET_S = 1.08e-5  # core-seconds per packet per veth crossed (fixed part)
COST_PER_BYTE_S = 4.0e-10  # core-seconds per byte per veth crossed
LOAD_WARN = 0.8  # share of all cores above which the emulation is likely CPU-bound (see the module docstring)


@dataclass(frozen=True)
class Flow:
    job: str
    src: str
    dst: str
    cap_bps: float  # the job's own cap (or the host link rate)


@dataclass(frozen=True)
class Estimate:
    flows: int
    offered_bps: float
    pps: float  # data + ACK packets per second, summed over flows
    crossings_per_s: float  # packets x veths crossed
    load: float  # estimated share of all cores
    load_mtu9000: float
    cores: int
    mtu: int


def routers_between(a: HostInfo, b: HostInfo, topology: str) -> int:
    if a.leaf == b.leaf:
        return 1
    if topology == "fat-tree" and a.pod == b.pod:
        return 3
    return 5 if topology == "fat-tree" else 3


def resolve_ranks(ranks: Any, topo: Topology) -> list[str]:
    hosts = list(topo.hosts)
    if isinstance(ranks, (list, tuple)):
        return list(ranks)
    by_leaf: dict[str, list[str]] = {}
    for h in hosts:
        by_leaf.setdefault(topo.hosts[h].leaf, []).append(h)
    if ranks == "one_per_leaf":
        return [v[0] for v in by_leaf.values()]
    if ranks == "leaf_interleaved":
        cols = list(by_leaf.values())
        return [c[i] for i in range(max(map(len, cols))) for c in cols if i < len(c)]
    return hosts


def job_flows(job: Any, topo: Topology, link_bps: float) -> list[Flow]:
    """The flows a job keeps busy at once (an approximation per kind; small probes and trains are ignored)."""
    kind, name = job.kind, job.name
    if kind == "iperf":
        cap = float(job.rate_bps or link_bps)
        return [
            Flow(name, job.src, job.dst, cap / job.parallel if job.rate_bps else link_bps) for _ in range(job.parallel)
        ]
    if kind in ("shortflows", "incast"):
        return [Flow(name, s, job.receiver, link_bps) for s in job.senders]
    if kind == "ps":
        return [Flow(name, w, s, link_bps) for w in job.workers for s in job.servers]
    if kind == "pipeline":
        st = list(job.stages)
        return [Flow(name, a, b, link_bps) for a, b in itertools.pairwise(st)]
    if hasattr(job, "ranks"):  # collectives: every rank sends to its ring successor (alltoall: to everyone)
        r = resolve_ranks(job.ranks, topo)
        if len(r) < 2:
            return []
        if kind == "alltoall":
            return [Flow(name, a, b, link_bps / (len(r) - 1)) for a in r for b in r if a != b]
        return [Flow(name, r[i], r[(i + 1) % len(r)], link_bps) for i in range(len(r))]
    return []


def estimate(spec: FabricSpec, workload: Iterable[Any], caps: dict[str, Any] | None = None) -> Estimate:
    topo = Topology(spec)
    link = spec.host_link.rate_bps
    flows = [f for job in workload for f in job_flows(job, topo, link) if f.src in topo.hosts and f.dst in topo.hosts]
    out_deg = Counter(f.src for f in flows)
    in_deg = Counter(f.dst for f in flows)
    cores = int((caps or {}).get("cpus") or os.cpu_count() or 1)
    offered = pps = cross = 0.0
    cost = {1500: 0.0, spec.mtu: 0.0, 9000: 0.0}
    for f in flows:
        rate = min(f.cap_bps, link / out_deg[f.src], link / in_deg[f.dst])
        veths = routers_between(topo.hosts[f.src], topo.hosts[f.dst], spec.topology) + 1
        offered += rate
        for mtu in cost:
            frame = mtu + ETH_HEADER
            data = rate / (8 * frame)
            per = data * (COST_PER_PACKET_S + COST_PER_BYTE_S * frame) + data * ACKS_PER_DATA * (
                COST_PER_PACKET_S + COST_PER_BYTE_S * 66
            )
            cost[mtu] += per * veths
            if mtu == spec.mtu:
                pps += data * (1 + ACKS_PER_DATA)
                cross += data * (1 + ACKS_PER_DATA) * veths
    return Estimate(len(flows), offered, pps, cross, cost[spec.mtu] / cores, cost[9000] / cores, cores, spec.mtu)


def preflight(spec: FabricSpec, workload: Iterable[Any], caps: dict[str, Any] | None = None) -> list[str]:
    """Warnings for a scenario whose offered load this machine probably cannot emulate faithfully."""
    e = estimate(spec, workload, caps)
    if e.load <= LOAD_WARN:
        return []
    factor = e.load / LOAD_WARN
    msg = (
        f"offered load: {e.flows} flows, {e.offered_bps / 1e6:.0f} Mbit/s, ~{e.pps / 1e3:.0f} kpps at MTU {e.mtu} "
        f"({e.crossings_per_s / 1e3:.0f}k veth crossings/s) needs about {e.load:.0%} of {e.cores} cores "
        f"(above {LOAD_WARN:.0%} the emulation is CPU-bound and the run will likely fail its fidelity checks)"
    )
    fixes = [f"scale rates down by at least {factor:.1f}x (fabric.scale: {max(2, round(factor + 0.5))})"]
    if e.mtu < 9000:
        fixes.append(
            f"use jumbo frames (host_link.mtu: 9000: about {e.load_mtu9000:.0%} of the cores"
            + (", which fits)" if e.load_mtu9000 <= LOAD_WARN else ", still too much on its own)")
        )
    return [msg, "suggestion: " + "; or ".join(fixes)]
