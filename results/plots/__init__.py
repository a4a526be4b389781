"""The report's figures (matplotlib Agg, PNG and SVG), one style per variant from ``results.style``.

``make_plots(cmp, out_dir)`` draws every figure it has data for and returns the files written and, for each
figure it skipped, the reason (logged too): a figure with no data is never drawn empty.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from results.compare import Comparison, Row
from results.metrics import load_window
from results.plots import classes as plots_classes
from results.plots import events as plots_events
from results.plots import kernel as plots_kernel
from results.plots import pfc as plots_pfc
from results.record import Run
from results.stats import ecdf
from results.style import StyleRegistry
from results.tables import numbers

log = logging.getLogger(__name__)
HOT_QUEUES = 3


class NoData(Exception):
    """The figure has nothing to show; the message says why."""


@dataclass
class Plots:
    files: dict[str, list[Path]] = field(default_factory=dict)  # figure name -> [png, svg]
    skipped: dict[str, str] = field(default_factory=dict)  # figure name -> reason
    titles: dict[str, str] = field(default_factory=dict)


def _durations(df: Any, keep: Any = None) -> np.ndarray:
    """t_end - t_start of the rows whose both times are numbers (and ``keep``, a mask, when given)."""
    d = numbers(df, "t_end") - numbers(df, "t_start")
    if keep is not None:
        d = d[keep]
    return d.dropna().to_numpy()


def _each_run(row: Row, pick: Callable[[Run], np.ndarray]) -> np.ndarray:
    """``pick`` over each run of a row (the small per-flow tables it reads stay cached for the next figure)."""
    parts = [pick(run) for run in row.runs]
    return np.concatenate(parts) if parts else np.array([], dtype=float)


def _iter_times(row: Row) -> np.ndarray:
    def pick(run: Run) -> np.ndarray:
        it = run.table("iterations")
        return _durations(it, numbers(it, "warmup").fillna(0) == 0)

    return _each_run(row, pick)


def _fcts(row: Row) -> np.ndarray:
    return _each_run(row, lambda run: _durations(run.table("fct")))


def _rtts(row: Row) -> np.ndarray:
    """Every probe sent inside the traffic window, as the summary's rtt figures count them: one never answered is
    an infinite round trip (+inf), so the CDF ends below 1 by the share lost."""

    def pick(run: Run) -> np.ndarray:
        w = load_window(run)
        tab = run.table("rtt")
        t, v = numbers(tab, "t_send"), numbers(tab, "rtt_s")
        inside = t.notna() if w is None else (t >= w[0]) & (t <= w[1])
        return v[inside].fillna(np.inf).to_numpy()

    return _each_run(row, pick)


def _cdf(
    cmp: Comparison, reg: StyleRegistry, data: Callable[[Row], np.ndarray], what: str, scale: float, unit: str
) -> Figure:
    series = [(row, data(row)) for row in cmp.rows]
    series = [(row, d) for row, d in series if d.size]
    if not series:
        raise NoData(f"no run recorded {what}")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    lost = 0
    for row, d in series:
        finite = d[np.isfinite(d)]  # +inf: a sample that never ended (a probe never answered)
        lost += d.size - finite.size
        x, y = ecdf(finite * scale)
        y = y * finite.size / d.size
        st = reg.style(row.label)
        label = row.label if finite.size == d.size else f"{row.label} ({d.size - finite.size} of {d.size} lost)"
        ax.step(x, y, where="post", **{**st.line(), "label": label})
        ax.plot(
            x[-1:],
            y[-1:],
            marker=st.marker,
            color=st.color,
            linestyle="none",
            markerfacecolor="white" if st.hollow else st.color,
        )
    ax.set_xlabel(f"{what} ({unit})")
    ax.set_ylabel("fraction")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    n = sum(d.size for _, d in series)
    ends = f"; {lost} never answered: a curve ends below 1 by its share lost" if lost else ""
    ax.set_title(f"CDF of {what} per variant ({n} samples{ends})", fontsize=10)
    return fig


def cdf_iterations(cmp: Comparison, reg: StyleRegistry) -> Figure:
    return _cdf(cmp, reg, _iter_times, "collective iteration time", 1e3, "ms")


def cdf_fct(cmp: Comparison, reg: StyleRegistry) -> Figure:
    return _cdf(cmp, reg, _fcts, "flow completion time", 1e3, "ms")


def cdf_rtt(cmp: Comparison, reg: StyleRegistry) -> Figure:
    return _cdf(cmp, reg, _rtts, "RTT under load", 1e3, "ms")


def queue_occupancy(cmp: Comparison, reg: StyleRegistry) -> Figure:
    """The backlog over time of the queues with the largest max, as steps: queues.csv has a row when a counter
    changed, and the value holds until the next row (a line between rows would draw slopes that never were)."""
    hottest: dict[str, float] = {}
    for row in cmp.rows:
        for s in row.summaries:
            for q, v in (s.get("queues") or {}).items():
                hottest[q] = max(hottest.get(q, 0.0), v.get("backlog_max_bytes") or 0.0)
    top = [q for q in sorted(hottest, key=lambda q: -hottest[q]) if hottest[q] > 0][:HOT_QUEUES]
    if not top:
        raise NoData("no queue ever held a backlog (or queues.csv was not recorded)")
    fig, axes = plt.subplots(len(top), 1, figsize=(7, 2.4 * len(top) + 0.6), sharex=True, squeeze=False)
    for row in cmp.rows:  # one run's queues.csv at a time
        tab = row.runs[0].table("queues")
        backlog = numbers(tab, "backlog_bytes")
        t0 = float(numbers(tab, "t").min()) if len(tab) else 0.0
        for ax, q in zip(axes[:, 0], top, strict=True):
            node, dev = q.split(":", 1)
            here = (tab["node"] == node) & (tab["dev"] == dev) & backlog.notna() if len(tab) else None
            if here is None or not here.any():
                continue
            t = numbers(tab, "t")[here].to_numpy()
            order = np.argsort(t, kind="stable")  # a row holds its value until the next (results.timeweighted)
            kb = backlog[here].to_numpy()[order] / 1e3
            ax.step(t[order] - t0, kb, where="post", linewidth=1, **reg.style(row.label).line())
            plots_events.event_marks(ax, row.runs[0], t0, reg.style(row.label).color)
        row.runs[0].forget("queues")
    for ax, q in zip(axes[:, 0], top, strict=True):
        ax.set_ylabel("backlog (KB)")
        ax.set_title(f"{q} (max {hottest[q] / 1e3:.1f} KB)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[-1, 0].set_xlabel("time since first sample (s); first repetition of each variant; link events marked")
    fig.suptitle(f"Occupancy of the {len(top)} hottest queues")
    return fig


def _bars(ax: Any, cmp: Comparison, reg: StyleRegistry, key: str, scale: float, ylabel: str) -> bool:
    rows = [r for r in cmp.rows if r.cells[key].mean is not None]
    for i, row in enumerate(rows):
        c = row.cells[key]
        ax.bar(
            i,
            (c.mean or 0) * scale,
            yerr=None if c.ci95 is None else c.ci95 * scale,
            capsize=4,
            **reg.style(row.label).bar(),
        )
    ax.set_xticks(range(len(rows)), [r.label for r in rows], rotation=15, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    if not rows:
        ax.text(0.5, 0.5, f"{key}: not applicable", ha="center", transform=ax.transAxes)
    return bool(rows)


def bars_throughput_drops(cmp: Comparison, reg: StyleRegistry) -> Figure:
    if all(r.cells["goodput_bps"].mean is None and r.cells["drops_total"].mean is None for r in cmp.rows):
        raise NoData("neither goodput nor drops could be computed for any variant")
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 4))
    _bars(a, cmp, reg, "goodput_bps", 1e-6, "aggregate goodput (Mb/s)")
    _bars(b, cmp, reg, "drops_total", 1, "drops (all queues)")
    a.set_title("throughput (mean, 95% CI)", fontsize=10)
    b.set_title("drops (mean, 95% CI)", fontsize=10)
    fig.tight_layout()
    return fig


def _mean_nested(row: Row, key: str) -> dict[str, dict[str, float]]:
    acc: dict[str, dict[str, list[float]]] = {}
    for s in row.summaries:
        for a, inner in (s.get(key) or {}).items():
            for b, v in inner.items():
                acc.setdefault(a, {}).setdefault(b, []).append(float(v))
    return {a: {b: float(np.mean(v)) for b, v in inner.items()} for a, inner in acc.items()}


def heatmap_traffic(cmp: Comparison, reg: StyleRegistry) -> Figure:
    mats = [(row, _mean_nested(row, "traffic_matrix")) for row in cmp.rows]
    mats = [(row, m) for row, m in mats if m]
    if not mats:
        raise NoData("no run recorded bytes between host pairs (flows.csv / steps.csv)")
    hosts = sorted({h for _, m in mats for a, inner in m.items() for h in (a, *inner)})
    fig, axes = plt.subplots(1, len(mats), figsize=(4.2 * len(mats) + 1, 4.2), squeeze=False)
    vmax = max(v for _, m in mats for inner in m.values() for v in inner.values()) / 1e6
    for ax, (row, m) in zip(axes[0], mats, strict=True):
        grid = np.array([[m.get(a, {}).get(b, 0.0) / 1e6 for b in hosts] for a in hosts])
        im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=vmax)
        ax.set_xticks(range(len(hosts)), hosts, rotation=90, fontsize=7)
        ax.set_yticks(range(len(hosts)), hosts, fontsize=7)
        ax.set_xlabel("destination")
        ax.set_ylabel("source")
        ax.set_title(row.label, fontsize=9, color=reg.style(row.label).color)
    fig.colorbar(im, ax=axes[0].tolist(), label="MB (mean over repetitions)")
    fig.suptitle("Traffic matrix: bytes between host pairs")
    return fig


def heatmap_links(cmp: Comparison, reg: StyleRegistry) -> Figure:
    per = []
    for row in cmp.rows:
        acc: dict[str, list[float]] = {}
        for s in row.summaries:
            for port, v in (s.get("links") or {}).items():
                acc.setdefault(port, []).append(float(v["util_mean"]))
        per.append((row, {p: float(np.mean(v)) for p, v in acc.items()}))
    per = [(row, m) for row, m in per if m]
    if not per:
        raise NoData("no link utilization (links.csv or fabric port rates missing)")
    ports = sorted({p for _, m in per for p in m})
    grid = np.array([[m.get(p, np.nan) * 100 for _, m in per] for p in ports])
    fig, ax = plt.subplots(figsize=(2.2 * len(per) + 3, 0.28 * len(ports) + 1.6))
    im = ax.imshow(grid, cmap="magma", vmin=0, vmax=100, aspect="auto")
    ax.set_yticks(range(len(ports)), ports, fontsize=7)
    ax.set_xticks(range(len(per)), [r.label for r, _ in per], rotation=15, fontsize=8)
    for j, (row, _) in enumerate(per):
        ax.get_xticklabels()[j].set_color(reg.style(row.label).color)
    for i in range(len(ports)):
        for j in range(len(per)):
            if not np.isnan(grid[i, j]):
                ax.text(
                    j,
                    i,
                    f"{grid[i, j]:.0f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if grid[i, j] < 60 else "black",
                )
    fig.colorbar(im, ax=ax, label="mean utilization (%)")
    ax.set_title("Per-link utilization (egress port, mean over the run)")
    fig.tight_layout()
    return fig


def ecmp_spines(cmp: Comparison, reg: StyleRegistry) -> Figure:
    per = []
    for row in cmp.rows:
        acc: dict[str, list[float]] = {}
        for s in row.summaries:
            for spine, b in (s.get("bytes_per_spine") or {}).items():
                acc.setdefault(spine, []).append(float(b))
        per.append((row, acc))
    per = [(row, a) for row, a in per if a]
    if not per:
        raise NoData("no bytes counted towards spines (no spine layer, or no links.csv)")
    spines = sorted({s for _, a in per for s in a})
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(spines) * len(per) + 2), 4))
    width = 0.8 / len(per)
    for k, (row, acc) in enumerate(per):
        x = np.arange(len(spines)) + (k - (len(per) - 1) / 2) * width
        ax.bar(x, [np.mean(acc.get(s, [0.0])) / 1e6 for s in spines], width, **reg.style(row.label).bar())
    ax.set_xticks(range(len(spines)), spines)
    ax.set_ylabel("MB sent towards the spine (mean over repetitions)")
    ax.set_title("ECMP: bytes per spine")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return fig


FIGURES: dict[str, tuple[str, Callable[[Comparison, StyleRegistry], Figure]]] = {
    "cdf_iteration_time": ("CDF of collective iteration time", cdf_iterations),
    "iteration_timeline": (
        "Collective iterations over time, with link events",
        lambda c, r: plots_events.iteration_timeline(c, r, NoData),
    ),
    "cdf_fct": ("CDF of flow completion time", cdf_fct),
    "cdf_rtt": ("CDF of RTT under load", cdf_rtt),
    "queue_occupancy": ("Queue occupancy of the hottest queues", queue_occupancy),
    "throughput_drops": ("Throughput and drops", bars_throughput_drops),
    "traffic_matrix": ("Traffic matrix", heatmap_traffic),
    "link_utilization": ("Per-link utilization", heatmap_links),
    "ecmp_spines": ("ECMP bytes per spine", ecmp_spines),
    "class_throughput": (
        "Traffic classes at the busiest port with classes",
        lambda c, r: plots_classes.class_throughput(c, r, NoData),
    ),
    "pause_time": ("PFC pause time per port and hop", lambda c, r: plots_pfc.pause_time(c, r, NoData)),
    "microburst": ("Largest microburst at slot resolution", lambda c, r: plots_kernel.microburst(c, r, NoData)),
    "cdf_sojourn": ("CDF of per-packet sojourn time", lambda c, r: plots_kernel.cdf_sojourn(c, r, NoData)),
    "cdf_dequeue_gap": (
        "Dequeue-gap deviations (direct fidelity check)",
        lambda c, r: plots_kernel.cdf_dequeue_gap(c, r, NoData),
    ),
}


def save(fig: Figure, paths: list[Path]) -> None:
    """PNG (100 dpi) and SVG cropped to what is drawn: the crop is measured once and serves both files
    (``bbox_inches="tight"`` measures it again for each file, with a whole extra drawing each time)."""
    fig.canvas.draw()
    bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(0.1)  # 0.1 in: savefig's own tight padding
    fig.savefig(paths[0], dpi=100, bbox_inches=bbox)
    fig.savefig(paths[1], bbox_inches=bbox)


def make_plots(cmp: Comparison, out_dir: Path, registry: StyleRegistry | None = None) -> Plots:
    out_dir.mkdir(parents=True, exist_ok=True)
    reg = registry or StyleRegistry(cmp.labels)
    result = Plots()
    for name, (title, draw) in FIGURES.items():
        result.titles[name] = title
        try:
            fig = draw(cmp, reg)
        except NoData as exc:
            result.skipped[name] = str(exc)
            log.info("plot %s skipped: %s", name, exc)
            continue
        paths = [out_dir / f"{name}.png", out_dir / f"{name}.svg"]
        try:
            save(fig, paths)
        finally:
            plt.close(fig)
        result.files[name] = paths
    return result
