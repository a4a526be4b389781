"""The flows a workload keeps busy, and for each the share of its endpoints' host links and the veths it crosses.

A flow's rate is capped by its job (iperf ``rate``) and by its share of its sender's and receiver's host links; a
packet crosses one veth per router on its path, plus one. Oversubscribed uplinks and ECMP collisions are not
modelled: fewer packets get through, but a congested path costs more per packet.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from testbed.spec.fabric import FabricSpec
from testbed.spec.topology import HostInfo, Topology


@dataclass(frozen=True)
class Flow:
    job: str
    src: str
    dst: str
    cap_bps: float  # the job's own cap (or the host link rate)


@dataclass(frozen=True)
class FlowPath:
    """A flow with what the estimate needs: its share of its endpoints' links and the veths it crosses."""

    flow: Flow
    out_deg: int
    in_deg: int
    veths: int

    def rate(self, link_bps: float) -> float:
        return min(self.flow.cap_bps, link_bps / self.out_deg, link_bps / self.in_deg)


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
    """The flows a job keeps busy at once (an approximation per kind; small probes and trains are ignored).

    A flow's ``cap_bps`` is its job's own cap, or ``math.inf`` when only the host links limit it."""
    kind, name = job.kind, job.name
    if kind == "iperf":
        cap = float(job.rate_bps) / job.parallel if job.rate_bps else math.inf
        return [Flow(name, job.src, job.dst, cap) for _ in range(job.parallel)]
    if kind in ("shortflows", "incast"):
        return [Flow(name, s, job.receiver, math.inf) for s in job.senders]
    if kind == "ps":
        return [Flow(name, w, s, math.inf) for w in job.workers for s in job.servers]
    if kind == "pipeline":
        st = list(job.stages)
        return [Flow(name, a, b, math.inf) for a, b in itertools.pairwise(st)]
    if hasattr(job, "ranks"):  # collectives: every rank sends to its ring successor (alltoall: to everyone)
        r = resolve_ranks(job.ranks, topo)
        if len(r) < 2:
            return []
        if kind == "alltoall":
            return [Flow(name, a, b, math.inf) for a in r for b in r if a != b]  # link / (n - 1): out_deg
        return [Flow(name, r[i], r[(i + 1) % len(r)], math.inf) for i in range(len(r))]
    return []


def flow_paths(spec: FabricSpec, topo: Topology, jobs: Iterable[Any]) -> list[FlowPath]:
    """Every flow of ``jobs`` between hosts of the fabric, with its endpoints' fan-out and fan-in and its veths."""
    link = spec.host_link.rate_bps
    flows = [f for job in jobs for f in job_flows(job, topo, link) if f.src in topo.hosts and f.dst in topo.hosts]
    out_deg = Counter(f.src for f in flows)
    in_deg = Counter(f.dst for f in flows)
    return [
        FlowPath(
            f, out_deg[f.src], in_deg[f.dst], routers_between(topo.hosts[f.src], topo.hosts[f.dst], spec.topology) + 1
        )
        for f in flows
    ]
