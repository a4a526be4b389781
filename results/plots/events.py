"""Link events on the time series: vertical marks where a link went down, came up, was degraded or restored, and
where routing converged (link_events.csv), and the iteration timeline that shows what they cost a collective."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from results.compare import Comparison
from results.style import StyleRegistry
from results.tables import numbers

LINESTYLE = {"down": "--", "up": "--", "degrade": "-.", "restore": "-.", "rerouted": ":"}


def event_marks(ax: Any, run: Any, t0: float, color: str) -> int:
    """Draw the run's link events on ``ax`` at their times since ``t0``; how many were drawn."""
    tab = run.table("link_events")
    if tab.empty:
        return 0
    drawn = 0
    for t, event, link in zip(numbers(tab, "t"), tab["event"].astype(str), tab["link"].astype(str), strict=True):
        ax.axvline(t - t0, color=color, linestyle=LINESTYLE.get(event, ":"), linewidth=0.9, alpha=0.7)
        if event != "rerouted":
            ax.annotate(
                f"{link} {event}",
                (t - t0, 1.0),
                xycoords=("data", "axes fraction"),
                rotation=90,
                fontsize=7,
                va="top",
                ha="right",
                color=color,
            )
        drawn += 1
    return drawn


def iteration_timeline(cmp: Comparison, reg: StyleRegistry, no_data: type[Exception]) -> Figure:
    """Each collective iteration's time against when it started, first repetition of each variant, with the
    link events marked: a stall shows as one tall point at the failure."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    drew = False
    for row in cmp.rows:
        run = row.runs[0]
        tab = run.table("iterations")
        if tab.empty:
            continue
        start, end = numbers(tab, "t_start"), numbers(tab, "t_end")
        window = run.manifest.get("traffic_window") or [float(start.min())]
        t0 = float(window[0])
        style = reg.style(row.label)
        ax.plot((start - t0).to_numpy(), (end - start).to_numpy(), marker="o", markersize=3, **style.line())
        event_marks(ax, run, t0, style.color)
        drew = True
    if not drew:
        plt.close(fig)
        raise no_data("no collective iterations (iterations.csv empty or not recorded)")
    ax.set_xlabel("iteration start since traffic started (s); first repetition of each variant")
    ax.set_ylabel("iteration time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle("Collective iterations over time (dashed: link down/up, dotted: rerouted)")
    return fig
