"""What a point needs of the machine beyond CPU, checked before anything is built: memory for the fabric's nodes,
and the time its workload needs at the least against the time the scenario gives it.

Each node is a network namespace with a shell and its veths: ``NODE_MEMORY_BYTES`` each (measured, docs/bench.md);
a fabric whose nodes would take more than ``MEMORY_SHARE`` of the memory available now is refused
(``check_fabric_size``), as is one above the harness's ceiling (``testbed.spec.fabric.MAX_NODES``, checked when
the scenario is read).

A job's bytes cross its links no faster than the fastest port of the fabric carries payload, so each kind has a
lower bound on its time (the ideal times of ``traffic.formulas``, taken at that fastest rate): a collective's
iterations, a parameter server's pushes, a pipeline's compute, an incast's rounds at the receiver, an iperf3 or
probe job's own duration. A job whose lower bound is above the scenario's ``duration`` (after its
``start_after``), or one iteration of which is above the job's per-iteration ``timeout``, can never finish: it is
refused with one line (``SpecError``: exit 2) naming the key to change and the least time it needs. This is what
stops ``size: 1e18`` before workers build schedules of 10^13 slices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.spec.fabric import FabricSpec
from testbed.spec.fields import SpecError
from testbed.spec.topology import Topology
from testbed.spec.workload import CollectiveJob, PipelineJob, PsJob, ShortFlowsJob, StepJob, TraceJob
from traffic import formulas
from traffic.ranked import resolve_ranks
from traffic.trace_job import job_graph
from traffic.trace_schedule import TraceBuilder

NODE_MEMORY_BYTES = 1_000_000  # a node's idle cost (docs/bench.md, "Node limits"), doubled for traffic
MEMORY_SHARE = 0.5  # the rest is for the traffic, the sampler, the records and everything else on the machine


def mem_available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable from /proc/meminfo, or None where it cannot be read."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fabric_size(spec: FabricSpec, available: int | None = None) -> None:
    """Refuse (``SpecError`` on ``fabric``) a fabric whose nodes need more than MEMORY_SHARE of the memory available."""
    available = mem_available_bytes() if available is None else available
    if available is None:
        return
    need = spec.node_count * NODE_MEMORY_BYTES
    if need > MEMORY_SHARE * available:
        raise SpecError(
            "fabric",
            f"{spec.node_count} nodes need about {need / 1e9:.1f} GB ({NODE_MEMORY_BYTES / 1e6:g} MB each), above "
            f"{MEMORY_SHARE:.0%} of the {available / 1e9:.1f} GB this machine has available",
        )


@dataclass(frozen=True)
class Need:
    """A job's least time: per iteration (0 for kinds without iterations) and in all, with what sets it."""

    iteration_s: float
    total_s: float
    key: str  # the key whose value sets the time (size, iterations, duration, ...)
    why: str


def _fastest_payload_Bps(topo: Topology) -> float:
    return max(p.link.payload_rate_bps for p in topo.ports()) / 8


def job_need(job: Any, topo: Topology) -> Need:
    """The least time ``job`` needs on ``topo`` (never above what it can take: every bound is an ideal)."""
    rate = _fastest_payload_Bps(topo)
    if isinstance(job, CollectiveJob):
        hosts = resolve_ranks(job.ranks, topo.hosts, job.name)
        leaves = [h.leaf for h in hosts]
        its = [formulas.ideal_time(job.kind, job.algorithm, len(hosts), w, rate, leaves) for w in job.wire_sizes]
        if len(its) == 1:
            return _iterated(job, its[0], "size", f"{job.kind} of {job.wire_size:,} bytes over {len(hosts)} ranks")
        runs = job.warmup + job.iterations
        what = f"{runs} iterations of each of {len(its)} sizes up to {job.wire_size:,} bytes over {len(hosts)} ranks"
        return Need(max(its), runs * sum(its), "sizes", f"{what}, {sum(its):.3g} s a round")
    if isinstance(job, StepJob):
        leaves = [h.leaf for h in resolve_ranks(job.ranks, topo.hosts, job.name)]
        key = "path" if isinstance(job, TraceJob) else "algorithm"
        _, built, ideal = TraceBuilder(job_graph(job, len(leaves)), job.slice, rate, key, leaves).build()
        what = f"a {job.kind} step of {len(built)} nodes over {len(leaves)} ranks"
        return _iterated(job, ideal, key, f"{what} (ideal {ideal:.3g} s: its critical path at the link rate)")
    if isinstance(job, PsJob):
        it = formulas.ps_ideal_time(len(job.workers), len(job.servers), job.size, rate)
        return _iterated(job, it, "size", f"{len(job.workers)} pushes of {job.size:,} bytes")
    if isinstance(job, PipelineJob):
        compute = formulas.pipeline_ideal_time(len(job.stages), job.microbatches, job.compute, job.compute_bwd)
        wire = job.microbatches * max(job.activation, job.gradient) / rate  # M of each cross a stage's link
        return _iterated(job, max(compute, wire), "microbatches", f"{job.microbatches} micro-batches")
    if isinstance(job, ShortFlowsJob):
        smallest = min(size for size, _ in job.sizes)
        flows = job.count * len(job.senders)
        return Need(0.0, flows * smallest / rate, "count", f"{flows} flows of at least {smallest:,} bytes")
    if hasattr(job, "duration"):  # iperf3, probes: they run for their own duration
        return Need(0.0, float(job.duration), "duration", "its own duration")
    if job.kind == "scapy_train":
        return Need(0.0, (job.trains - 1) * job.gap, "trains", f"{job.trains} trains {job.gap:g} s apart")
    return Need(0.0, 0.0, "", "")


def _iterated(job: Any, iteration_s: float, key: str, what: str) -> Need:
    runs = job.warmup + job.iterations
    return Need(iteration_s, runs * iteration_s, key, f"{runs} iterations of {what}, {iteration_s:.3g} s each")


def check_time(workload: Iterable[Any], topo: Topology, duration_s: float, path: str = "workload") -> None:
    """Refuse (``SpecError``) the first job that cannot finish in the scenario's duration or its iteration timeout."""
    for i, job in enumerate(workload):
        where = f"{path}[{i}]"
        try:
            need = job_need(job, topo)
        except SpecError as exc:  # a malformed trace: its path under this job's
            raise SpecError(f"{where}.{exc.path}", exc.reason) from None
        timeout = getattr(job, "timeout", None)
        if need.iteration_s and timeout is not None and need.iteration_s > timeout:
            raise SpecError(
                f"{where}.{need.key}",
                f"one iteration needs at least {need.iteration_s:.3g} s at the fastest link's rate ({need.why}), "
                f"above the job's timeout of {timeout:g} s",
            )
        end = job.start_after + need.total_s
        if end > duration_s:
            raise SpecError(
                f"{where}.{need.key}",
                f"needs at least {need.total_s:.3g} s at the fastest link's rate ({need.why})"
                + (f" after start_after {job.start_after:g} s" if job.start_after else "")
                + f", above the scenario's duration of {duration_s:g} s",
            )
