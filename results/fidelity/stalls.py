"""The ``stalls`` and ``slow_iterations`` guardrails: no flow stalls and no iteration runs long unless the record
names why.

``stalls``: every stall of stalls.csv with its cause (``results.stall_causes``). Link events, PFC pauses and drops
with their retransmission timeouts are the experiment's: reported, faithful. A machine-wide stall, a receiver that
did not read, a queue that held packets without sending them are the testbed's, and an unexplained stall is one
nobody can account for: each of those makes the run unfaithful, its reason naming the stall (job, iteration,
step, flow, duration).

``slow_iterations``: per job and message size (a size sweep's iterations differ by design) with at least
``MIN_ITERATIONS`` measured iterations, an iteration longer than ``slow_iter_factor`` x their median is explained by a stall over it (whatever its cause), retransmissions on the
job's own sockets during it (iterations.csv ``retrans``), a link event, a PFC pause, drops at any queue of the
fabric, or another job's transfer that started during it; one that none explains makes the run unfaithful.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from results.checks import Rows, Thresholds, as_frame, check
from results.ports import split_ports
from results.stall_causes import EXPERIMENT, Stall, StallTables, column, judge_stalls, overlap, rise
from results.tables import numbers

MIN_ITERATIONS = 3  # a median of fewer is no reference


def _detail(st: Stall) -> dict[str, Any]:
    return {
        "job": st.job,
        "flow": f"{st.src}->{st.dst}",
        "flow_id": st.flow_id,
        "iter": st.iter,
        "step": st.step,
        "t_start": st.t_start,
        "duration_s": None if np.isnan(st.t_end) else round(st.duration_s, 4),
        "sides": sorted({str(r["side"]) for r in st.rows}),
        "cause": st.cause,
        "experiment": st.cause in EXPERIMENT,
        "evidence": st.evidence,
    }


def check_stalls(
    tabs: StallTables,
    queues: Rows = (),
    links: Rows = (),
    cpu: Rows = (),
    th: Thresholds = Thresholds(),
    judged: Sequence[Stall] | None = None,
) -> dict[str, Any]:
    """Every stall named with its cause; ``judged``: ``judge_stalls``'s answer when the caller has it."""
    every = list(judged) if judged is not None else judge_stalls(tabs, queues, links, cpu, th)
    if not every:
        return check("stalls", True, 0, 0, "no flow went two RTOs without progress")
    bad = [s for s in every if s.cause not in EXPERIMENT]
    parts = [f"{s.describe()}: {s.cause}" + (f" ({s.evidence[0]})" if s.evidence else "") for s in (bad or every)]
    if bad:
        reason = f"{len(bad)} of {len(every)} stalls the experiment did not make: " + "; ".join(parts[:5])
    else:
        reason = f"{len(every)} stalls, each the experiment's: " + "; ".join(parts[:5])
    worst = max((s.duration_s for s in every if not np.isnan(s.t_end)), default=None)
    return check("stalls", not bad, len(bad), 0, reason, {"worst_s": worst, "stalls": [_detail(s) for s in every]})


class _Causes:
    """What can explain a slow iteration, from one run's tables."""

    def __init__(self, tabs: StallTables, queues: Rows, stalls: Sequence[Stall]):
        self.stalls = stalls
        self.queues = split_ports(as_frame(queues), ("drops",))
        le, pa = as_frame(tabs.link_events), as_frame(tabs.pauses)
        self.events = list(zip(numbers(le, "t"), column(le, "event"), column(le, "link")))
        self.pauses = np.column_stack((numbers(pa, "t_start").to_numpy(), numbers(pa, "t_end").to_numpy()))
        other = pd.concat([as_frame(tabs.flows), as_frame(tabs.fct)], ignore_index=True)
        self.starts = list(zip(column(other, "job"), numbers(other, "t_start")))

    def of(self, job: str, a: float, b: float, retrans: float, timeouts: float) -> list[str]:
        why = [f"{s.describe()} ({s.cause})" for s in self.stalls if s.t_start <= b and s.t_seen >= a]
        if retrans > 0:
            rto = f", {timeouts:.0f} timeouts" if timeouts > 0 else ""
            why.append(f"its sockets retransmitted {retrans:.0f} segments{rto}")
        why += [f"link event {e} {lk}" for t, e, lk in self.events if a <= t <= b]
        if overlap(self.pauses, a, b) > 0:
            why.append("PFC pauses")
        dropped = sum(rise(rows, "drops", a, b) for rows in self.queues.values())
        if dropped > 0:
            why.append(f"{dropped:.0f} drops in the fabric's queues")
        arrived = sorted({str(j) for j, t in self.starts if str(j) != job and a <= t <= b})
        if arrived:
            why.append(f"transfers of {', '.join(arrived)} started")
        return why


def check_slow_iterations(
    tabs: StallTables, queues: Rows = (), th: Thresholds = Thresholds(), judged: Sequence[Stall] | None = None
) -> dict[str, Any]:
    """Iterations over ``th.slow_iter_factor`` x the median of their job's iterations of the same size, each with
    what explains it."""
    name, factor = "slow_iterations", th.slow_iter_factor
    it = as_frame(tabs.iterations)
    if it.empty:
        return check(name, None, None, factor, "no iterations")
    it = it.assign(_d=numbers(it, "t_end") - numbers(it, "t_start"), _w=numbers(it, "warmup").fillna(0))
    it = it[(it["_w"] == 0) & it["_d"].notna()]
    causes = _Causes(tabs, queues, list(judged) if judged is not None else judge_stalls(tabs, queues, th=th))
    slow: list[dict[str, Any]] = []
    worst, jobs = 0.0, 0
    size = numbers(it, "size_bytes").fillna(-1) if "size_bytes" in it else pd.Series(-1.0, index=it.index)
    for (job, _), g in it.groupby([it["job"].astype(str), size]):
        if len(g) < MIN_ITERATIONS:
            continue
        jobs += 1
        med = float(g["_d"].median())
        lost = zip(numbers(g, "retrans").fillna(0), numbers(g, "timeouts").fillna(0), strict=True)
        spans = zip(g["iter"], numbers(g, "t_start"), numbers(g, "t_end"), g["_d"], lost, strict=True)
        for i, a, b, d, (retrans, timeouts) in spans:
            ratio = d / med if med > 0 else 0.0
            worst = max(worst, ratio)
            if ratio > factor:
                why = causes.of(str(job), a, b, retrans, timeouts)
                slow.append({"job": job, "iter": int(i), "seconds": round(float(d), 4), "median_s": round(med, 4),
                             "ratio": round(ratio, 2), "explained_by": why})  # fmt: skip
    if not jobs:
        return check(name, None, None, factor, f"no job had {MIN_ITERATIONS} measured iterations of one size")
    bad = [s for s in slow if not s["explained_by"]]
    over = f"over {factor}x their job's median"
    if bad:
        parts = [
            f"job {s['job']} iter {s['iter']} took {s['seconds']:.2f} s, {s['ratio']:.1f}x its median" for s in bad
        ]
        reason = f"{len(bad)} iterations {over} with no cause in the record: " + "; ".join(parts[:5])
    elif slow:
        parts = [f"job {s['job']} iter {s['iter']} {s['ratio']:.1f}x: {s['explained_by'][0]}" for s in slow]
        reason = f"{len(slow)} iterations {over}, each with its cause: " + "; ".join(parts[:5])
    else:
        reason = f"every measured iteration within {factor}x its job's median (slowest {worst:.2f}x)"
    return check(name, not bad, round(worst, 3), factor, reason, {"slow": slow} if slow else None)
