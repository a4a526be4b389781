"""Traffic classes in the report: what each class of the busiest port with classes sent, and dropped."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from results.compare import Comparison
from results.style import StyleRegistry
from results.tables import numbers


def busiest_port(tab: Any) -> tuple[str, str] | None:
    """(node, dev) of the port with classes that sent the most bytes over all its classes; None without classes."""
    if tab.empty:
        return None
    sent = tab.assign(tx=numbers(tab, "tx_bytes")).groupby(["node", "dev"])["tx"].sum()
    node, dev = sent.idxmax()
    return str(node), str(dev)


def class_throughput(cmp: Comparison, reg: StyleRegistry, no_data: type[Exception]) -> Figure:
    """Mbit/s each class sent at each variant's busiest port with classes (first repetition; over the traffic
    window), one bar per variant, with the class's drops above it."""
    bars: list[tuple[str, str, dict[str, tuple[float, int]]]] = []  # (label, port, class -> (Mbit/s, drops))
    for row in cmp.rows:
        run = row.runs[0]
        tab = run.table("classes")
        port = busiest_port(tab)
        window = run.manifest.get("traffic_window")
        if port is None or not window:
            continue
        seconds = max(float(window[1]) - float(window[0]), 1e-9)
        at = tab[(tab["node"] == port[0]) & (tab["dev"] == port[1])]
        sent, drops = numbers(at, "tx_bytes"), numbers(at, "drops")
        per = {str(c): (float(b) * 8 / seconds / 1e6, int(d)) for c, b, d in zip(at["class"], sent, drops, strict=True)}
        bars.append((row.label, f"{port[0]}:{port[1]}", per))
    if not bars:
        raise no_data("no run had traffic classes (classes.csv empty or not recorded)")
    classes = list(dict.fromkeys(c for _, _, per in bars for c in per))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(classes) + 2), 3.4))
    width = 0.8 / len(bars)
    for i, (label, where, per) in enumerate(bars):
        x = np.arange(len(classes)) + (i - (len(bars) - 1) / 2) * width
        heights = [per.get(c, (0.0, 0))[0] for c in classes]
        ax.bar(x, heights, width, **{**reg.style(label).bar(), "label": f"{label} ({where})"})
        for xi, c, h in zip(x, classes, heights, strict=True):
            if per.get(c, (0.0, 0))[1]:
                ax.annotate(f"{per[c][1]} drops", (xi, h), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(classes)), classes)
    ax.set_ylabel("Mbit/s sent (traffic window)")
    ax.set_title("Traffic classes at the busiest port with classes")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return fig
