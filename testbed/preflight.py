"""Pre-flight estimate: will this machine keep up with a scenario's offered load? (pure; before anything is built)

``estimate(fabric_spec, workload, caps, model, telemetry) -> Estimate`` gives the numbers; ``preflight(...)`` the
warnings (empty = fits); ``check_budget(point, caps)`` / ``require_budget(point, caps)`` compare a scenario point's
predicted CPU load with the budget and refuse a point over it with ``BudgetError`` (one line: the point, its load
against the budget, and the highest host-link rate that fits). The budget is ``CPU_BUDGET`` of the whole machine
for the mean load (``TESTBED_CPU_BUDGET`` overrides it), and ``PEAK_LIMIT`` for the busiest interval.
``manifest_entry(...)`` is what a run records under ``preflight``.

Forwarding model: every flow's rate is capped by its job (iperf ``rate``) and by its share of its sender's and
receiver's host links; it sends rate / (8 x (MTU + 14)) data packets per second plus one ACK per two, and every
packet costs the CPU once per veth it crosses (routers on its path + 1) with a fixed part and a per-byte part.
The senders' and receivers' own TCP work is inside those two coefficients, because they are fitted to whole
flows (a ring of 3 veths per packet on average: flows under one leaf cost a little more than the model says,
flows across a spine a little less). Oversubscribed uplinks and ECMP collisions are not modelled: fewer packets
get through, but a congested path costs more per packet.

Time: jobs whose spans are known (iperf: ``start_after`` + ``duration``) only add up while they overlap, and the
load is their time-weighted mean (a run's headroom target is its mean CPU over the traffic window); every other
job may run at any time from its start, alone or with any of the others (jobs that share a host link share its
rate, so fewer jobs can offer more), and while one runs its load counts in full. ``Estimate.peak`` is the
busiest interval.

Queue-sampler model (the harness's own largest cost, not forwarding): per tick of ``telemetry.queue_hz`` a fixed
part plus one netlink dump per namespace, plus a cost per row written. A queue gets a row in a tick when its
counters moved (a packet left it since the last tick: probability 1 - exp(-pps / hz)), else every keyframe
(0.1 s); links.csv likewise at ``link_hz``, per interface. The traffic processes' own user time (Python workers,
iperf3's) is not modelled.

The coefficients (``CostModel``) come from ``testbed calibrate`` (``testbed.calibrate``), cached per machine;
without a calibration of this machine the built-in ``FALLBACK`` is used and every message says the estimate is
uncalibrated.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from testbed.errors import TestbedError
from testbed.fabricspec import FabricSpec
from testbed.topology import HostInfo, Topology

ETH_HEADER = 14
ACK_FRAME = 66  # Ethernet + IPv4 + TCP with timestamps, no payload
ACKS_PER_DATA = 0.5  # delayed ACKs: one per two segments (GRO is off on every port)
# Built-in coefficients, used when this machine has no calibration. Forwarding: fitted once to the 8-flow ring on
# a 2x4x2 fabric (`testbed bench`, figure a, CPU from /proc/stat ticks, no sampler). The queue sampler: what
# `testbed calibrate` measured on the development machines (Linux 6.18, 2 x AMD EPYC).
COST_PER_PACKET_S = 1.08e-5  # core-seconds per packet per veth crossed (fixed part)
COST_PER_BYTE_S = 4.0e-10  # core-seconds per byte per veth crossed
SAMPLER_PER_TICK_S = 1.1e-4  # core-seconds per sampler tick (the loop, the link and CPU reads it makes)
SAMPLER_PER_NETNS_S = 1.8e-5  # core-seconds per namespace per tick (one RTM_GETQDISC dump)
SAMPLER_PER_ROW_S = 1.4e-5  # core-seconds per row written (queues.csv, links.csv)
KEYFRAME_S = 0.1  # the sampler writes an unchanged queue or link this often (SamplerConfig.keyframe_s)
LOAD_WARN = 0.8  # forwarding share of all cores above which the emulation is likely CPU-bound
# Share of the machine a point may be predicted to use: the rest is headroom for what the model leaves out (the
# traffic workers' Python, bursts above the mean) and for a slower machine of the same kind.
CPU_BUDGET = 0.60
BUDGET_ENV = "TESTBED_CPU_BUDGET"
# The busiest interval of a workload may go above the budget (the mean is what the budget bounds) but not above
# this: both cores would be saturated (the fidelity guardrail counts a core >= 95% busy as saturated).
PEAK_LIMIT = 0.90
# Whether an uncalibrated estimate (the built-in constants) refuses a point too, or only warns. The constants are
# one machine's, and machines of the same kind differ by 2x; every shipped scenario fits them.
ENFORCE_UNCALIBRATED = True
log = logging.getLogger(__name__)


class BudgetError(TestbedError, RuntimeError):
    """A scenario point is predicted to need more CPU than the budget allows (refused before anything is built)."""


@dataclass(frozen=True)
class CostModel:
    """CPU cost coefficients, in core-seconds: forwarding per veth crossing, and the queue sampler."""

    per_crossing_s: float = COST_PER_PACKET_S
    per_byte_s: float = COST_PER_BYTE_S
    sampler_per_tick_s: float = SAMPLER_PER_TICK_S
    sampler_per_netns_s: float = SAMPLER_PER_NETNS_S
    sampler_per_row_s: float = SAMPLER_PER_ROW_S
    calibrated: bool = False
    source: str = "uncalibrated: built-in constants (run `python3 -m testbed calibrate`)"

    def crossing_cost(self, frame_bytes: float) -> float:
        """Core-seconds for one packet of ``frame_bytes`` to cross one veth."""
        return self.per_crossing_s + self.per_byte_s * frame_bytes

    def describe(self) -> dict[str, Any]:
        return {
            "per_crossing_s": self.per_crossing_s,
            "per_byte_s": self.per_byte_s,
            "sampler_per_tick_s": self.sampler_per_tick_s,
            "sampler_per_netns_s": self.sampler_per_netns_s,
            "sampler_per_row_s": self.sampler_per_row_s,
            "calibrated": self.calibrated,
            "source": self.source,
        }


FALLBACK = CostModel()


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
    load: float  # forwarding: estimated share of all cores
    load_mtu9000: float  # forwarding at MTU 9000
    cores: int
    mtu: int
    sampler_load: float = 0.0  # the queue sampler's share of all cores (0 without telemetry)
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


@dataclass(frozen=True)
class _Path:
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


def job_span(job: Any) -> tuple[float, float]:
    """When a job sends, in seconds from the workload's start: known for iperf (``duration``), else open-ended."""
    start = float(getattr(job, "start_after", 0.0) or 0.0)
    if job.kind == "iperf":
        return start, start + float(job.duration)
    return start, math.inf


def _combos(open_: list[Any], max_open: int) -> list[list[Any]]:
    """Every combination of the open-ended jobs (all of them and each alone when there are many)."""
    if len(open_) <= max_open:
        return [list(c) for n in range(len(open_), -1, -1) for c in itertools.combinations(open_, n)]
    return [open_, *([j] for j in open_), []]


def intervals(
    workload: Iterable[Any], topo: Topology | None = None, max_open: int = 6
) -> list[tuple[float, list[list[Any]]]]:
    """The workload's timeline: ``(seconds, candidate job sets)`` between consecutive job starts and known ends, the
    last one ``math.inf`` long while an open-ended job is still running.

    In each interval run the jobs whose known span covers it and, in any combination, the open-ended jobs started
    by then (one may be between iterations or done; and jobs sharing a host link share its rate, so fewer jobs can
    offer more): its load is the busiest candidate's. More than ``max_open`` open-ended jobs: all of them, and each
    alone. Jobs that keep no flow busy (probes, packet trains) are left out (given ``topo``)."""
    jobs = list(workload)
    if topo is not None:
        jobs = [j for j in jobs if job_flows(j, topo, 0.0)]
    spans = [job_span(j) for j in jobs]
    bounds = sorted({0.0} | {s for s, _ in spans} | {e for _, e in spans if e != math.inf})
    out: list[tuple[float, list[list[Any]]]] = []
    for i, t in enumerate(bounds):
        nxt = bounds[i + 1] if i + 1 < len(bounds) else math.inf
        fixed = [j for j, (s, e) in zip(jobs, spans) if s <= t < e and e != math.inf]
        open_ = [j for j, (s, e) in zip(jobs, spans) if s <= t and e == math.inf]
        if nxt == math.inf and not open_:
            break  # everything has ended
        out.append((nxt - t, [fixed + c for c in _combos(open_, max_open)]))
    return out or [(math.inf, [[]])]


def phases(workload: Iterable[Any], topo: Topology | None = None, max_open: int = 6) -> list[list[Any]]:
    """The distinct sets of jobs that may send at the same time (see ``intervals``)."""
    out: list[list[Any]] = []
    for _, cands in intervals(workload, topo, max_open):
        for c in cands:
            if c and c not in out:
                out.append(c)
    return out or [[]]


def _paths(spec: FabricSpec, topo: Topology, jobs: Iterable[Any]) -> list[_Path]:
    link = spec.host_link.rate_bps
    flows = [f for job in jobs for f in job_flows(job, topo, link) if f.src in topo.hosts and f.dst in topo.hosts]
    out_deg = Counter(f.src for f in flows)
    in_deg = Counter(f.dst for f in flows)
    return [
        _Path(
            f, out_deg[f.src], in_deg[f.dst], routers_between(topo.hosts[f.src], topo.hosts[f.dst], spec.topology) + 1
        )
        for f in flows
    ]


def _packets(rate_bps: float, mtu: int) -> tuple[float, float]:
    """(data, ACK) packets per second of a TCP flow at ``rate_bps`` of Ethernet frames."""
    data = rate_bps / (8 * (mtu + ETH_HEADER))
    return data, data * ACKS_PER_DATA


def forwarding_core_s(paths: list[_Path], link_bps: float, mtu: int, model: CostModel) -> float:
    """Core-seconds per second the kernel spends moving these flows through their veths."""
    total = 0.0
    for p in paths:
        data, acks = _packets(p.rate(link_bps), mtu)
        total += p.veths * (data * model.crossing_cost(mtu + ETH_HEADER) + acks * model.crossing_cost(ACK_FRAME))
    return total


def _changed(pps: float, hz: float) -> float:
    """Probability that at least one packet passed between two ticks of ``hz`` (Poisson arrivals)."""
    return 1.0 - math.exp(-pps / hz) if hz > 0 else 0.0


def sampler_rows_per_s(
    paths: list[_Path], link_bps: float, mtu: int, ports: int, queue_hz: float, link_hz: float
) -> float:
    """Rows per second the queue sampler writes: a queue or link whose counters moved since the last tick, else a
    keyframe. Flows sharing a port are counted apart (an upper bound), capped at one row per port per tick."""
    queues = links = 0.0
    for p in paths:
        data, acks = _packets(p.rate(link_bps), mtu)
        queues += p.veths * (_changed(data, queue_hz) + _changed(acks, queue_hz))
        links += 2 * p.veths * _changed(data + acks, link_hz)  # both ends of every veth count the packets
    keyframes = ports / KEYFRAME_S
    return min(ports * queue_hz, queues * queue_hz + keyframes) + min(ports * link_hz, links * link_hz + keyframes)


def sampler_core_s(namespaces: int, rows_per_s: float, queue_hz: float, model: CostModel) -> float:
    """Core-seconds per second of the queue sampler at ``queue_hz`` over ``namespaces``, writing ``rows_per_s``."""
    if queue_hz <= 0:
        return 0.0
    return queue_hz * (model.sampler_per_tick_s + namespaces * model.sampler_per_netns_s) + (
        rows_per_s * model.sampler_per_row_s
    )


def _cores(caps: Mapping[str, Any] | None) -> int:
    return int((caps or {}).get("cpus") or os.cpu_count() or 1)


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
    paths = _paths(spec, topo, jobs)
    offered = pps = cross = 0.0
    for p in paths:
        rate = p.rate(link_bps)
        data, acks = _packets(rate, mtu)
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
    caps: Mapping[str, Any] | None = None,
    model: CostModel = FALLBACK,
    telemetry: Any = None,
    link_bps: float | None = None,
) -> Estimate:
    """The workload's load (``telemetry`` given: the queue sampler's too), as the mean over its timeline (the
    headroom target is the mean over a run's traffic window), with its busiest interval in ``peak``.

    Where the timeline is known (iperf jobs' ``start_after`` and ``duration``) the load is time-weighted over it;
    an open-ended job (collectives, incast, ...) may run for any time, so while one runs its interval's load counts
    at least as much as the mean (the larger of the two is taken). ``link_bps`` replaces the host-link rate (what
    the budget's rate solve varies)."""
    topo = Topology(spec)
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
    caps: Mapping[str, Any] | None = None,
    model: CostModel = FALLBACK,
) -> list[str]:
    """Warnings for a scenario whose offered load this machine probably cannot emulate faithfully."""
    e = estimate(spec, workload, caps, model)
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


# --- the CPU budget --------------------------------------------------------------------------------------------
def cpu_budget(env: Mapping[str, str] | None = None) -> float:
    """The share of the machine a point may use: ``CPU_BUDGET``, or ``TESTBED_CPU_BUDGET`` (0.75 or 75%)."""
    raw = (os.environ if env is None else env).get(BUDGET_ENV, "").strip()
    if not raw:
        return CPU_BUDGET
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BudgetError(f"{BUDGET_ENV}={raw!r} is not a share of the machine (e.g. 0.75 or 75%)") from None
    if not 0 < value <= 1:
        raise BudgetError(f"{BUDGET_ENV}={raw!r} must be above 0 and at most 1 (100%)")
    return value


def current_model() -> CostModel:
    """This machine's calibrated model (``testbed calibrate``'s cache), else ``FALLBACK``."""
    from testbed.calibrate import load_matching

    cal = load_matching()
    return cal.model if cal is not None else FALLBACK


@dataclass(frozen=True)
class BudgetVerdict:
    """A point's predicted load against the budget, and the highest host-link rate that fits."""

    label: str
    estimate: Estimate
    budget: float
    rate_bps: float  # the point's host-link rate
    max_rate_bps: float | None  # highest host-link rate within the budget (None: none does)
    mtu9000_fits: bool  # jumbo frames alone would bring it within the budget (False at MTU 9000)
    model: CostModel

    @property
    def fits(self) -> bool:
        return within(self.estimate, self.budget)

    @property
    def enforced(self) -> bool:
        """Whether a point over the budget is refused (calibrated estimates; see ``ENFORCE_UNCALIBRATED``)."""
        return self.model.calibrated or ENFORCE_UNCALIBRATED

    def message(self) -> str:
        """One line: the point, its predicted load against the budget, and what would fit."""
        e = self.estimate
        head = (
            f"{self.label}: predicted CPU load {e.total:.0%} of {e.cores} cores (forwarding {e.load:.0%}, queue sampler "
            f"{e.sampler_load:.0%} at {e.queue_hz:g} Hz; busiest interval {e.peak:.0%})"
        )
        if e.total > self.budget:
            head += f" is over the budget of {self.budget:.0%}"
        else:
            head += f": its busiest interval is over {max(PEAK_LIMIT, self.budget):.0%} (both cores saturated)"
        if self.max_rate_bps is None:
            fix = (
                f"no host-link rate fits: the queue sampler alone needs {e.sampler_load:.0%}; lower telemetry.queue_hz"
            )
        else:
            fix = (
                f"the highest host-link rate that fits is {_fmt_rate(self.max_rate_bps)} "
                f"(now {_fmt_rate(self.rate_bps)}; fabric.scale divides every rate)"
            )
        if self.mtu9000_fits:
            fix += ", or host_link.mtu: 9000 fits as it is"
        how = "calibrated" if self.model.calibrated else "uncalibrated estimate: run `python3 -m testbed calibrate`"
        if not self.enforced:
            how = "uncalibrated estimate, not enforced: run `python3 -m testbed calibrate`"
        return f"{head}; {fix} ({how}; {BUDGET_ENV} overrides the budget)"


def within(e: Estimate, budget: float) -> bool:
    """The budget's test: the mean load at most ``budget`` and the busiest interval at most ``PEAK_LIMIT``."""
    return e.total <= budget and e.peak <= max(PEAK_LIMIT, budget)


def _fmt_rate(bps: float) -> str:
    if bps >= 1e9:
        return f"{bps / 1e9:.3g} Gbit/s"
    if bps >= 1e6:
        return f"{bps / 1e6:.3g} Mbit/s"
    return f"{bps / 1e3:.3g} kbit/s"


def _round_down(x: float, digits: int = 2) -> float:
    """``x`` rounded down to ``digits`` significant digits (so a rounded rate still fits)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return math.floor(x / scale + 1e-9) * scale


def max_host_rate(
    spec: FabricSpec,
    workload: Iterable[Any],
    caps: Mapping[str, Any] | None,
    model: CostModel,
    telemetry: Any,
    budget: float,
) -> float | None:
    """The highest host-link rate (bit/s, two significant digits, rounded down) at which the predicted load fits
    ``budget`` (and its busiest interval ``PEAK_LIMIT``); None when even an idle fabric does not (the sampler alone
    is over it).

    The load grows with the rate: linearly for every flow the host links limit, not at all for flows at their job's
    own cap, and the sampler's rows saturate; so the solve bisects on the monotone load."""
    jobs = list(workload)

    def fits(rate: float) -> bool:
        return within(estimate(spec, jobs, caps, model, telemetry, link_bps=rate), budget)

    lo, hi = 0.0, float(spec.host_link.rate_bps)
    if not fits(1.0):
        return None
    if fits(hi):
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return _round_down(lo)


def variant_text(point: Any) -> str:
    """A sweep point's values, short: ``ecn={mode: step, k: 30KB}, buffer=100KB`` (empty without a sweep)."""
    return ", ".join(f"{k.split('.')[-1]}={_short(v)}" for k, v in getattr(point, "variant", ()) or ())


def point_label(point: Any) -> str:
    """A sweep point as the user knows it: the scenario's name and its sweep values."""
    values = variant_text(point)
    return f"scenario {point.name!r}" + (f" point [{values}]" if values else "")


def _short(v: Any) -> str:
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k}: {_short(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_short(x) for x in v) + "]"
    return str(v)


def check_budget(
    point: Any,
    caps: Mapping[str, Any] | None,
    model: CostModel | None = None,
    env: Mapping[str, str] | None = None,
) -> BudgetVerdict:
    """A scenario point's predicted load (forwarding + queue sampler, with the telemetry it will run with) against
    the budget. ``model`` defaults to this machine's calibration (else ``FALLBACK``)."""
    from testbed import guestfit

    model = current_model() if model is None else model
    budget = cpu_budget(env)
    telemetry, _ = guestfit.fit_telemetry(point.telemetry, env)
    spec = point.fabric
    e = estimate(spec, point.workload, caps, model, telemetry)
    max_rate = None
    mtu9000 = False
    if not within(e, budget):
        max_rate = max_host_rate(spec, point.workload, caps, model, telemetry, budget)
        if spec.mtu < 9000:
            jumbo = replace(spec, host_link=replace(spec.host_link, mtu=9000))
            mtu9000 = within(estimate(jumbo, point.workload, caps, model, telemetry), budget)
    return BudgetVerdict(point_label(point), e, budget, float(spec.host_link.rate_bps), max_rate, mtu9000, model)


def require_budget(
    point: Any,
    caps: Mapping[str, Any] | None,
    model: CostModel | None = None,
    env: Mapping[str, str] | None = None,
) -> BudgetVerdict:
    """``check_budget``, raising ``BudgetError`` (one line: ``BudgetVerdict.message``) when the point is over it;
    an uncalibrated estimate over it is logged as a warning instead (``ENFORCE_UNCALIBRATED``)."""
    verdict = check_budget(point, caps, model, env)
    if not verdict.fits:
        if verdict.enforced:
            raise BudgetError(verdict.message())
        log.warning("warning: %s", verdict.message())
    return verdict


def manifest_entry(
    spec: FabricSpec,
    workload: Iterable[Any],
    caps: Mapping[str, Any] | None = None,
    telemetry: Any = None,
    model: CostModel | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What a run records under ``preflight``: the warnings, the estimate (with the sampler when ``telemetry`` is
    given), the budget, whether the estimate fits it (None without ``telemetry``: not judged) and whether a point
    over it is refused, and the cost model used (calibrated, or the built-in constants)."""
    model = current_model() if model is None else model
    jobs = list(workload)
    if telemetry is not None:
        from testbed import guestfit

        telemetry, _ = guestfit.fit_telemetry(telemetry, env)
    e = estimate(spec, jobs, caps, model, telemetry)
    try:
        budget: float | str = cpu_budget(env)
    except BudgetError as exc:
        budget = str(exc)
    return {
        "warnings": preflight(spec, jobs, caps, model),
        "estimate": {**e.describe(), **({} if telemetry is not None else {"sampler": "not estimated (no telemetry)"})},
        "budget": budget,
        "fits": within(e, budget) if isinstance(budget, float) and telemetry is not None else None,
        "enforced": model.calibrated or ENFORCE_UNCALIBRATED,
        "model": model.describe(),
    }
