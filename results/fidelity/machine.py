"""Machine stalls as a measured quantity of every run, and the ``machine_stalls`` guardrail.

A vCPU the hypervisor stops runs nothing meanwhile: neither the processes nor the softirqs that forward packets. The
per-CPU canary (testbed/telemetry/canary.py) records each stall it sees (cpu_stalls.csv: the time a CPU did not run
beyond what waiting for it explains) and the kernel's own steal time per CPU over its life (manifest
``machine_stalls``). Here they become the run's stall figures (``stall_figures``): each stall event (the CPUs'
stalls merged where they overlap), the share of the traffic window during which some CPU was stopped, the time all
were, and the steal share.

``check_machine_stalls`` makes a run unfaithful when its stalls could have moved its figures, whatever the queue
telemetry:
- the stalled share of the window (the canary's, or the kernel's steal share where larger) over ``1 - rate_min``:
  a stopped CPU forwards nothing, so a figure over the window (goodput, busbw, utilisation) can be short by that
  share, more than the rate guardrail accepts of a port;
- a stall longer than the expected time of a collective step it overlaps (the step's bytes at its rank's link
  rate): that step then took at least twice what the link allows, which no step time or iteration figure can
  hide.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from results.checks import Rows, Thresholds, as_frame, check
from results.tables import numbers


@dataclass(frozen=True)
class StallEvent:
    """Time during which at least one CPU did not run: the union of overlapping per-CPU stalls. ``all_s``: the part
    of it during which every CPU the canary watched was stopped."""

    t_start: float
    t_end: float
    cpus: tuple[int, ...]
    all_s: float

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start


def cpu_intervals(cpu_stalls: Rows) -> list[tuple[float, float, int]]:
    """cpu_stalls.csv's rows as (start, end, cpu): a canary woke at ``t + late_s``, and the last ``stalled_s`` of its
    lateness is the time its CPU did not run."""
    df = as_frame(cpu_stalls)
    if df.empty:
        return []
    woke = numbers(df, "t") + numbers(df, "late_s")
    lost = numbers(df, "stalled_s")
    ok = woke.notna() & lost.notna()
    cpus = numbers(df, "cpu")[ok].astype(int)
    return sorted(zip((woke - lost)[ok].tolist(), woke[ok].tolist(), cpus.tolist(), strict=True))


def _all_stopped(spans: Sequence[tuple[float, float, int]], n_cpus: int) -> float:
    """How long every one of ``n_cpus`` CPUs was inside one of ``spans`` at once."""
    if n_cpus <= 0:
        return 0.0
    edges = sorted({t for a, b, _ in spans for t in (a, b)})
    total = 0.0
    for a, b in itertools.pairwise(edges):
        mid = (a + b) / 2
        if len({c for s, e, c in spans if s <= mid < e}) >= n_cpus:
            total += b - a
    return total


def stall_events(cpu_stalls: Rows, n_cpus: int, window: tuple[float, float] | None = None) -> list[StallEvent]:
    """The per-CPU stalls merged into events where they overlap, clipped to ``window`` (the traffic's)."""
    spans = cpu_intervals(cpu_stalls)
    if window is not None:
        spans = [(max(a, window[0]), min(b, window[1]), c) for a, b, c in spans if b > window[0] and a < window[1]]
    events: list[StallEvent] = []
    group: list[tuple[float, float, int]] = []
    for span in spans + [(np.inf, np.inf, -1)]:
        if group and span[0] > max(b for _, b, _ in group):
            start, end = group[0][0], max(b for _, b, _ in group)
            events.append(StallEvent(start, end, tuple(sorted({c for *_, c in group})), _all_stopped(group, n_cpus)))
            group = []
        group.append(span)
    return events


def stall_figures(
    events: Sequence[StallEvent], health: Mapping[str, Any], window: tuple[float, float] | None = None
) -> dict[str, Any]:
    """The run's stall figures from its ``events`` (``stall_events`` over ``window``): each event (its start from
    the window's, in s), the stalled share of the window (some CPU stopped), the time every CPU was, the longest
    event and the kernel's steal share per CPU."""
    per = health.get("per_cpu") or {}
    span = (window[1] - window[0]) if window is not None else float(health.get("wall_s") or 0.0)
    t0 = window[0] if window is not None else (events[0].t_start if events else 0.0)
    wall = float(health.get("wall_s") or 0.0)
    steal = {cpu: float(v["steal_s"]) / wall for cpu, v in per.items() if "steal_s" in v and wall > 0}
    stalled = sum(e.duration_s for e in events)
    return {
        "window_s": span,
        "events": [
            {
                "t": round(e.t_start - t0, 4),
                "duration_s": round(e.duration_s, 4),
                "cpus": list(e.cpus),
                "all_cpus_s": round(e.all_s, 4),
            }
            for e in events
        ],
        "stalled_s": stalled,
        "stalled_share": stalled / span if span > 0 else 0.0,
        "all_cpus_s": sum(e.all_s for e in events),
        "longest_s": max((e.duration_s for e in events), default=0.0),
        "steal_share": steal,
        "floor_s": health.get("min_stall_s"),
    }


def _step_rates(ports: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each host's link rate (its own port's), the rate its steps' bytes leave at."""
    return {str(p["node"]): float(p["rate_bps"]) for p in ports if p.get("layer") == "host" and p.get("rate_bps")}


def steps_outlasted(events: Sequence[StallEvent], steps: Rows, ports: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Each stall longer than the expected time of a collective step it overlaps, with the shortest such step."""
    df = as_frame(steps)
    if df.empty or not events:
        return []
    rate = df["rank"].astype(str).map(_step_rates(ports))
    expected = (numbers(df, "bytes") * 8 / rate).to_numpy(dtype=float)
    t_start, t_end = numbers(df, "t_start").to_numpy(dtype=float), numbers(df, "t_end").to_numpy(dtype=float)
    out = []
    for e in events:
        hit = (t_start < e.t_end) & (t_end > e.t_start) & (expected < e.duration_s) & np.isfinite(expected)
        if hit.any():
            i = int(np.flatnonzero(hit)[np.argmin(expected[hit])])
            row = df.iloc[i]
            out.append({"stall_s": round(e.duration_s, 4), "cpus": list(e.cpus), "job": str(row["job"]),
                        "iter": int(row["iter"]), "step": int(row["step"]), "rank": str(row["rank"]),
                        "expected_s": round(float(expected[i]), 6)})  # fmt: skip
    return out


def check_machine_stalls(
    cpu_stalls: Rows,
    health: Mapping[str, Any] | None,
    window: tuple[float, float] | None = None,
    steps: Rows = (),
    ports: Sequence[Mapping[str, Any]] = (),
    th: Thresholds = Thresholds(),
) -> dict[str, Any]:
    """``machine_stalls``: the run's stall figures (details) and whether they could have moved its figures."""
    name, limit = "machine_stalls", round(1.0 - th.rate_min, 6)
    if not health or not health.get("per_cpu"):
        return check(name, None, None, limit, "no machine-stall canary in this record")
    events = stall_events(cpu_stalls, len(health["per_cpu"]), window)
    fig = stall_figures(events, health, window)
    steal = max(fig["steal_share"].values(), default=0.0)
    share = max(fig["stalled_share"], steal)
    outlasted = steps_outlasted(events, steps, ports)
    fig["steps_outlasted"] = outlasted
    floor = fig["floor_s"]
    seen = (
        f"{len(events)} stall{'' if len(events) == 1 else 's'} over {fig['stalled_share']:.2%} of the {fig['window_s']:.1f} s window"
        + (
            f" (longest {fig['longest_s'] * 1e3:.1f} ms, every CPU at once {fig['all_cpus_s'] * 1e3:.1f} ms)"
            if events
            else ""
        )
        + (f"; steal {steal:.2%}" if fig["steal_share"] else "; no steal time in the record")
        + (f"; stalls under {floor * 1e3:.0f} ms are not seen" if floor else "")
    )
    bad = []
    if share > limit:
        bad.append(f"stalled {share:.1%} of the window, over {limit:.0%} (what the rate guardrail allows a port)")
    if outlasted:
        o = outlasted[0]
        bad.append(
            f"{len(outlasted)} outlasted a collective step they overlapped: {o['stall_s'] * 1e3:.1f} ms "
            f"during job {o['job']} iter {o['iter']} step {o['step']} ({o['rank']}), expected "
            f"{o['expected_s'] * 1e3:.2f} ms"
        )
    reason = seen + (": " + "; ".join(bad) if bad else "")
    return check(name, not bad, round(share, 5), limit, reason, fig)
