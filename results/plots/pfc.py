"""PFC in the report: how long each port was paused, and how the pauses spread hop by hop from the congested
queue (pauses.csv, testbed/pfc)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from results.compare import Comparison
from results.style import StyleRegistry
from results.tables import numbers

TOP_PORTS = 10


def hops(tab: Any) -> dict[str, int]:
    """Each paused port's distance from the congestion: 1 when a queue that was never paused itself paused it (the
    congested queue), else one more than the paused queue that paused it (a queue is the port it sends on)."""
    by_port: dict[str, set[str]] = {}
    for port, queue in zip(tab["port"].astype(str), tab["queue"].astype(str), strict=True):
        by_port.setdefault(port, set()).add(queue)
    out: dict[str, int] = {}

    def hop(port: str, seen: frozenset[str]) -> int:
        if port not in by_port or port in seen:
            return 0
        if port not in out:
            out[port] = 1 + min(hop(q, seen | {port}) for q in by_port[port])
        return out[port]

    for port in by_port:
        hop(port, frozenset())
    return out


def pause_time(cmp: Comparison, reg: StyleRegistry, no_data: type[Exception]) -> Figure:
    """Left: the share of the traffic window each port was paused (the most paused ports of any variant; first
    repetition). Right: the pause-seconds of all ports at each hop from the congested queue."""
    per: list[tuple[str, dict[str, float], dict[int, float]]] = []  # (label, port -> share, hop -> seconds)
    for row in cmp.rows:
        run = row.runs[0]
        tab = run.table("pauses")
        window = run.manifest.get("traffic_window")
        if tab.empty or not window:
            continue
        seconds = max(float(window[1]) - float(window[0]), 1e-9)
        paused = tab.assign(d=numbers(tab, "duration_s")).groupby("port")["d"].sum()
        hop_of = hops(tab)
        by_hop: dict[int, float] = {}
        for port, d in paused.items():
            by_hop[hop_of[str(port)]] = by_hop.get(hop_of[str(port)], 0.0) + float(d)
        per.append((row.label, {str(p): float(d) / seconds for p, d in paused.items()}, by_hop))
    if not per:
        raise no_data("no run paused a port (pauses.csv empty or not recorded: no lossless class)")
    ports = sorted({p for _, s, _ in per for p in s}, key=lambda p: -max(s.get(p, 0.0) for _, s, _ in per))
    ports = ports[:TOP_PORTS]
    levels = sorted({h for _, _, b in per for h in b})
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.35 * len(ports) + 2.4))
    height, width = 0.8 / len(per), 0.8 / len(per)
    for i, (label, share, by_hop) in enumerate(per):
        style = reg.style(label).bar()
        y = np.arange(len(ports)) + (i - (len(per) - 1) / 2) * height
        left.barh(y, [100 * share.get(p, 0.0) for p in ports], height, **{**style, "label": label})
        x = np.arange(len(levels)) + (i - (len(per) - 1) / 2) * width
        right.bar(x, [by_hop.get(h, 0.0) for h in levels], width, **{**style, "label": label})
    left.set_yticks(range(len(ports)), ports)
    left.invert_yaxis()
    left.set_xlabel("% of the traffic window paused")
    left.set_title("PFC pause time per port")
    right.set_xticks(range(len(levels)), [str(h) for h in levels])
    right.set_xlabel("hops from the congested queue")
    right.set_ylabel("pause-seconds, all ports")
    right.set_title("Spread of pauses hop by hop")
    for ax in (left, right):
        ax.grid(axis="x" if ax is left else "y", alpha=0.3)
    right.legend(fontsize=8)
    return fig
