"""The report's figures from the kernel queue telemetry (runs with ``telemetry.bpf_queues``).

- ``microburst``: the largest microburst, the slot whose backlog rose most above the port's lowest backlog of the
  millisecond before, with the queue's occupancy at slot resolution (qslots.csv, 100 us by default) around it,
  one panel per variant (first repetition): what a poller at 1 kHz aliases or misses.
- ``cdf_sojourn``: per variant, the CDF of per-packet sojourn time (enqueue to dequeue) over every port, from the
  run's histograms (manifest ``qtelem_health``); the x values are the buckets' upper edges.
- ``cdf_dequeue_gap``: per variant, the CDF of the dequeue gaps' deviation from the ideal transmission time at
  busy ports (the direct fidelity check's data, results/fidelity/gaps.py): early negative, late positive.

A run without the kernel telemetry gives none of these; a figure no run has data for raises ``no_data`` (the
caller's ``results.plots.NoData``, passed in: this module sits below results.plots) and is skipped with the reason.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from results.compare import Comparison, Row
from results.fidelity.gaps import HALF, upper_edge_us
from results.style import StyleRegistry
from results.tables import numbers

BURST_SPAN_MS = 5.0  # either side of the burst's top slot
RISE_WINDOW_MS = 1  # a burst: the backlog's rise above its lowest of this long before
MAX_PANELS = 4


def _health(row: Row) -> list[dict[str, Any]]:
    return [h for h in (r.manifest.get("qtelem_health") for r in row.runs) if isinstance(h, dict) and h.get("ports")]


def _summed(row: Row, key: str, length: int) -> np.ndarray:
    """A per-port histogram (``soj_hist`` or ``gap_hist``) summed over every port of every run of ``row``."""
    total = np.zeros(length)
    for h in _health(row):
        for p in h["ports"].values():
            hist = p.get(key) or []
            if len(hist) == length:
                total += np.asarray(hist, dtype=float)
    return total


def _step_cdf(ax: Any, x: np.ndarray, counts: np.ndarray, style: Any, label: str) -> None:
    y = np.cumsum(counts) / counts.sum()
    ax.step(x, y, where="post", label=label, color=style.color, linestyle=style.linestyle, marker=style.marker,
            markevery=max(1, len(x) // 8), markerfacecolor="white" if style.hollow else style.color)  # fmt: skip


def _label(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)


def cdf_sojourn(cmp: Comparison, reg: StyleRegistry, no_data: type[Exception]) -> Figure:
    series = []
    for row in cmp.rows:
        h = _health(row)
        if not h:
            continue
        # the record's bucket edges; the open last bucket is drawn one doubling past the edge before it
        recorded = list(h[0].get("soj_edges_us") or [])
        edges = np.array([e if e is not None else 2.0 * (recorded[i - 1] or 1.0) for i, e in enumerate(recorded)])
        counts = _summed(row, "soj_hist", len(edges))
        if counts.sum() > 0:
            series.append((row, edges, counts))
    if not series:
        raise no_data("no run recorded sojourn times (telemetry.bpf_queues)")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for row, edges, counts in series:
        _step_cdf(ax, edges, counts, reg.style(row.label), f"{row.label} ({int(counts.sum())} packets)")
    ax.set_xscale("log")
    _label(
        ax,
        "sojourn time, enqueue to dequeue (us; upper bucket edges, the last one open)",
        "fraction of packets",
        "CDF of per-packet sojourn time, every port (kernel telemetry)",
    )
    return fig


def cdf_dequeue_gap(cmp: Comparison, reg: StyleRegistry, no_data: type[Exception]) -> Figure:
    series = [(row, _summed(row, "gap_hist", 2 * HALF)) for row in cmp.rows]
    series = [(row, c) for row, c in series if c.sum() > 0]
    if not series:
        raise no_data("no run recorded dequeue gaps (telemetry.bpf_queues with a busy port)")
    # each bucket at its end towards +inf on one signed axis: an early bucket's smaller magnitude (its lower edge,
    # 0 for bucket 0), a late bucket's upper edge (the open last one drawn at 2^HALF)
    early_ends = np.array([0.0] + [float(2 ** (b - 1)) for b in range(1, HALF)])
    late_ends = np.array([min(upper_edge_us(b), 2.0**HALF) for b in range(HALF)])
    x = np.concatenate([-early_ends[::-1], late_ends])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for row, counts in series:
        ordered = np.concatenate([counts[:HALF][::-1], counts[HALF:]])
        _step_cdf(ax, x, ordered, reg.style(row.label), f"{row.label} ({int(counts.sum())} gaps)")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.axvline(0, color="grey", linewidth=0.8)
    _label(
        ax,
        "dequeue gap - ideal transmission time (us, bucket edges): early < 0 < late",
        "fraction of gaps",
        "Direct fidelity check: dequeue-gap deviations at busy ports",
    )
    return fig


def _largest_rise(tab: pd.DataFrame) -> tuple[str, str, float, float] | None:
    """(node, dev, t, rise in bytes) of the slot whose backlog rose most above the lowest backlog of the
    ``RISE_WINDOW_MS`` before it, over every port: a burst, not the top of a standing queue."""
    best: tuple[str, str, float, float] | None = None
    t_all, hi_all, lo_all = numbers(tab, "t"), numbers(tab, "backlog_max"), numbers(tab, "backlog_min")
    for (node, dev), idx in tab.groupby(["node", "dev"], sort=False).groups.items():
        t = t_all[idx].to_numpy()
        order = np.argsort(t, kind="stable")
        t = t[order]
        lows = pd.Series(lo_all[idx].to_numpy()[order], index=pd.to_timedelta(t - t[0], unit="s"))
        floor = lows.rolling(f"{RISE_WINDOW_MS}ms").min().to_numpy()
        rise = hi_all[idx].to_numpy()[order] - floor
        if not np.isfinite(rise).any():
            continue
        i = int(np.nanargmax(rise))
        if best is None or rise[i] > best[3]:
            best = (str(node), str(dev), float(t[i]), float(rise[i]))
    return best


def _largest_burst(run: Any) -> tuple[str, float, np.ndarray, np.ndarray, np.ndarray] | None:
    """(port, rise KB, t - t_peak ms, backlog max KB, backlog min KB) around the run's largest rise."""
    tab = run.table("qslots")
    found = _largest_rise(tab) if len(tab) else None
    if found is None:
        run.forget("qslots")
        return None
    node, dev, t_peak, rise = found
    t = numbers(tab, "t")
    near = (tab["node"] == node) & (tab["dev"] == dev) & ((t - t_peak).abs() <= BURST_SPAN_MS / 1e3)
    order = np.argsort(t[near].to_numpy())
    dt = (t[near].to_numpy()[order] - t_peak) * 1e3
    hi = numbers(tab, "backlog_max")[near].to_numpy()[order] / 1e3
    lo = numbers(tab, "backlog_min")[near].to_numpy()[order] / 1e3
    run.forget("qslots")
    return f"{node}:{dev}", rise / 1e3, dt, hi, lo


def microburst(cmp: Comparison, reg: StyleRegistry, no_data: type[Exception]) -> Figure:
    panels = []
    for row in cmp.rows:
        burst = _largest_burst(row.runs[0]) if _health(row) else None
        if burst is not None:
            panels.append((row, burst))
    if not panels:
        raise no_data("no run recorded qslots.csv (telemetry.bpf_queues)")
    panels = panels[:MAX_PANELS]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.4 * len(panels) + 0.6), squeeze=False)
    for ax, (row, (port, rise, dt, hi, lo)) in zip(axes[:, 0], panels, strict=True):
        st = reg.style(row.label)
        ax.step(dt, hi, where="post", color=st.color, linewidth=1, label="max in slot")
        ax.step(dt, lo, where="post", color=st.color, linewidth=1, linestyle=":", label="min in slot")
        ax.set_title(f"{row.label}: {port}, +{rise:.1f} KB within {RISE_WINDOW_MS:g} ms", fontsize=9)
        ax.set_ylabel("backlog (KB)")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[-1, 0].set_xlabel("time from the burst's top slot (ms); a step per kernel slot with a packet event")
    fig.suptitle("Largest microburst at slot resolution (kernel telemetry, first repetition)")
    return fig
