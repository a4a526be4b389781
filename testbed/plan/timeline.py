"""A workload's timeline: which jobs may send at the same time.

Jobs whose spans are known (iperf: ``start_after`` + ``duration``) only add up while they overlap; every other job
may run at any time from its start, alone or with any of the others (jobs that share a host link share its rate,
so fewer jobs can offer more).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

from testbed.plan.flows import job_flows
from testbed.spec.topology import Topology


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
