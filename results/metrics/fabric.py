"""Fabric-side metrics of one run: queues, link utilization, PFC pauses (see results.metrics; ECMP balance is in
``results.metrics.ecmp``, TCP counters in ``results.metrics.tcp``).

Counters are cumulative, so a port's figure over the run is its last reading less its first, over the port's rows
in time order (``results.ports``). queues.csv and links.csv have a row when a counter changed (plus keyframes), so
their rows are not samples: backlog quantiles and utilisation means weigh each row by the time it held its value
(``results.timeweighted``), inside the run's traffic window (docs/statistics.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from results import queues_kernel, timeweighted
from results.ports import PortRows, first_last, split_ports
from results.record import Run
from results.summary import Summary
from results.tables import numbers, reason

UTIL_PEAK_WINDOW_S = 1.0
"""A link's utilisation peak (``util_max``) is its highest mean over windows of at least this length. After an idle
spell HTB lets a port send its burst at once, so over a short window a port reads above its rate; over a second the
burst is a small share, and the peak says how long the link was full. The summary records it
(``link_util_max_window_s``), so a table can say over what."""

BACKLOG_QUANTILE = 0.99  # the per-queue backlog figure: time-weighted p99 (``backlog_p99_bytes``)


COUNTERS_Q = ("drops", "marks", "overlimits", "tx_bytes")


def _named(df: pd.DataFrame, cols: tuple[str, ...]) -> dict[str, PortRows]:
    """Each port's series (``results.ports``) under its ``node:dev`` name, in name order."""
    return dict(sorted((f"{n}:{d}", rows) for (n, d), rows in split_ports(df, cols).items()))


def _delta(v: np.ndarray) -> float | None:
    ends = first_last(v)
    return None if ends is None else ends[1] - ends[0]


def _marks_total(per: dict[str, dict[str, Any]], marker: pd.DataFrame) -> float:
    """Marks over every port, each counted once: an eBPF marker's port by the marker's own final counter
    (marks.csv; the sampler's queue rows carry a copy of it, refreshed at link_hz, so adding both counted it twice),
    every other port by its queue rows (RED's marks)."""
    counted: set[str] = set()
    total = 0.0
    if not marker.empty:
        counts = numbers(marker, "marks").fillna(0)
        for node, dev, m in zip(marker["node"].astype(str), marker["dev"].astype(str), counts, strict=True):
            counted.add(f"{node}:{dev}")
            total += float(m)
    return total + float(sum(q["marks"] or 0 for key, q in per.items() if key not in counted))


def _kernel_queues(run: Run, series: dict[str, PortRows]) -> dict[str, dict[str, Any]]:
    """Per-queue figures from the kernel telemetry (results.queues_kernel), with the poller's overlimits where it
    ran; {} without qslots.csv."""
    health = run.manifest.get("qtelem_health") or {}
    if not health.get("slot_us"):
        return {}
    table = run.table("qslots")
    if "backlog_last" not in table.columns:  # a record from before the column: its poller's rows decide
        return {}
    per = queues_kernel.per_port(table, float(health["slot_us"]) / 1e6, health.get("ports") or {})
    run.forget("qslots")
    for key, q in per.items():
        if key in series:
            q["overlimits"] = _delta(series[key]["overlimits"])
    return per


def traffic_window(run: Run) -> tuple[float, float] | None:
    """The manifest's ``traffic_window`` (go to the workload's end; the guardrails judge it too), where time-weighted
    figures are weighed; None in a record without one, whose series are weighed whole."""
    window = run.manifest.get("traffic_window")
    if not isinstance(window, list | tuple) or len(window) != 2:
        return None
    lo, hi = float(window[0]), float(window[1])
    return (lo, hi) if hi > lo else None


def _poller_queue(rs: PortRows, window: tuple[float, float] | None) -> dict[str, Any]:
    """One queue's figures from its queues.csv rows: counters' last - first, the max over every row, and the
    time-weighted p99 inside ``window`` (None when no row's value held any time there)."""
    backlog = rs["backlog_bytes"][~np.isnan(rs["backlog_bytes"])]
    held = timeweighted.Held.of(rs["t"], rs["backlog_bytes"], window=window)
    return {
        "samples": len(rs["t"]),
        **{c: _delta(rs[c]) for c in COUNTERS_Q},
        "backlog_max_bytes": float(backlog.max()) if backlog.size else None,
        "backlog_p99_bytes": held.quantile(BACKLOG_QUANTILE) if held.total_s > 0 else None,
    }


def queues(run: Run, s: Summary) -> None:
    """Queue figures: from the kernel telemetry where the run has it (it sees every packet), else from the poller."""
    names = ("drops_total", "overlimits_total", "queue_backlog_max_bytes", "queue_backlog_p99_bytes", "queues")
    table = run.table("queues")
    series = _named(table, ("backlog_bytes", *COUNTERS_Q))
    marker = run.table("marks")
    kernel = _kernel_queues(run, series)
    if kernel:
        _put_queues(s, kernel, marker, "bpf", has_overlimits=bool(series))
    elif not series:
        for m in names:
            s.na(m, f"no queue samples: {reason(table) or 'queues.csv is empty'}")
        if not marker.empty:
            s.put("marks_total", _marks_total({}, marker))
        else:
            s.na("marks_total", f"no queue samples and no marker counters ({reason(marker)})")
        return
    else:
        window = traffic_window(run)
        per = {key: _poller_queue(rs, window) for key, rs in series.items()}
        _put_queues(s, per, marker, "poller")
    intervals = [np.diff(rs["t"]) for rs in series.values() if len(rs["t"]) > 2]
    if intervals:
        d = np.concatenate(intervals)
        lo = min(float(rs["t"][0]) for rs in series.values())
        hi = max(float(rs["t"][-1]) for rs in series.values())
        s.put(
            "queue_sampling", {"rate_hz": float(1 / d.mean()), "jitter": float(d.std() / d.mean()), "span_s": hi - lo}
        )


def _put_queues(
    s: Summary, per: dict[str, dict[str, Any]], marker: pd.DataFrame, source: str, has_overlimits: bool = True
) -> None:
    """The run's queue figures from per-queue ones, whichever telemetry counted them (``queue_source``)."""
    s.put("queues", per)
    s.put("queue_source", source)
    s.put("drops_total", sum(q["drops"] or 0 for q in per.values()))
    if has_overlimits:
        s.put("overlimits_total", sum(q["overlimits"] or 0 for q in per.values()))
    else:
        s.na("overlimits_total", "the kernel telemetry does not see overlimits and no poller sampled the queues")
    s.put("marks_total", _marks_total(per, marker))
    maxes = [q["backlog_max_bytes"] for q in per.values() if q["backlog_max_bytes"] is not None]
    p99s = [q["backlog_p99_bytes"] for q in per.values() if q["backlog_p99_bytes"] is not None]
    if maxes:
        s.put("queue_backlog_max_bytes", max(maxes))
        s.put("hottest_queue", max(per, key=lambda k: per[k]["backlog_max_bytes"] or 0))
    else:
        s.na("queue_backlog_max_bytes", f"the {source} telemetry has no backlog values")
    if p99s:
        s.put("queue_backlog_p99_bytes", max(p99s))
    else:
        why = "has no backlog values" if not maxes else "has no backlog value held inside the traffic window"
        s.na("queue_backlog_p99_bytes", f"the {source} telemetry {why}")


def _ports(run: Run) -> dict[str, dict[str, Any]]:
    ports = (run.manifest.get("fabric") or {}).get("ports") or []
    return {f"{p['node']}:{p['dev']}": p for p in ports if "node" in p and "dev" in p}


WINDOW_TOL_S = 1e-9  # a window this much short of its length counts as long enough: sums of epoch floats round


def util_max(t: np.ndarray, tx: np.ndarray, rate: float, window_s: float = UTIL_PEAK_WINDOW_S) -> float:
    """The highest mean rate / ``rate`` over windows of at least ``window_s``, one starting at each row (``t`` in
    time order) and ending at the first row ``window_s`` or more after it; a series shorter than ``window_s`` has its
    mean over its whole span (0 with no span)."""
    t, tx = np.asarray(t, dtype=float), np.asarray(tx, dtype=float)
    if len(t) < 2 or t[-1] <= t[0]:
        return 0.0
    rel = t - t[0]  # small numbers: the windows' ends round less
    end = np.searchsorted(rel, rel + window_s - WINDOW_TOL_S, "left")
    start = np.flatnonzero(end < len(t))
    if start.size == 0:
        return float((tx[-1] - tx[0]) * 8 / (t[-1] - t[0]) / rate)
    stop = end[start]
    return float(((tx[stop] - tx[start]) * 8 / (t[stop] - t[start])).max() / rate)


def util_mean(t: np.ndarray, tx: np.ndarray, rate: float, window: tuple[float, float] | None) -> float | None:
    """A port's mean utilisation over time inside ``window``: each interval between rows sends at its counter
    delta's rate, weighed by the part of it inside the window (an interval that straddles the window's edge counts
    its bytes pro rata); None when no interval lies inside."""
    dt, sent = np.diff(t), np.diff(tx)
    bps = np.divide(sent * 8, dt, out=np.full(dt.shape, np.nan), where=dt > 0)
    held = timeweighted.Held.of(t[:-1], bps, end=float(t[-1]), window=window)
    return held.mean() / rate if held.total_s > 0 else None


def links(run: Run, s: Summary) -> None:
    table = run.table("links")
    ports = _ports(run)
    series = _named(table, ("tx_bytes",))
    if not series or not ports:
        why = (reason(table) or "links.csv is empty") if not series else "the manifest has no fabric.ports (rates)"
        s.na("link_util_mean", why)
        s.na("link_util_max", why)
        s.na("links", why)
        return
    per: dict[str, dict[str, Any]] = {}
    skipped = []
    window = traffic_window(run)
    for key, rs in series.items():
        given = (ports.get(key) or {}).get("rate_bps")
        rate = float(given or 0)
        counted = ~np.isnan(rs["tx_bytes"])
        t, tx = rs["t"][counted], rs["tx_bytes"][counted]
        span = t[-1] - t[0] if len(t) > 1 else 0
        mean = util_mean(t, tx, rate, window) if rate > 0 and span > 0 else None
        if mean is None:
            skipped.append(key)
            continue
        per[key] = {
            "tx_bytes": float(tx[-1] - tx[0]),
            "rate_bps": given,
            "util_mean": mean,
            "util_max": util_max(t, tx, rate),
            "layer": ports[key].get("layer"),
            "direction": ports[key].get("direction"),
        }
    if not per:
        why = (
            f"no port in links.csv has a rate in fabric.ports and two samples around the traffic window "
            f"({len(skipped)} skipped)"
        )
        s.na("link_util_mean", why)
        s.na("link_util_max", why)
        s.na("links", why)
        return
    s.put("links", per)
    s.put("link_util_mean", float(np.mean([p["util_mean"] for p in per.values()])))
    s.put("link_util_max", float(max(p["util_max"] for p in per.values())))
    s.put("link_util_max_window_s", UTIL_PEAK_WINDOW_S)
    if skipped:
        s.put("links_skipped", skipped)


def pauses(run: Run, s: Summary) -> None:
    """PFC pauses (pauses.csv): how many, the pause-seconds of all ports, and per port."""
    if run.manifest.get("pfc") is None:
        for name in ("pauses_total", "pause_s_total"):
            s.na(name, "no lossless class: nothing pauses")
        return
    tab = run.table("pauses")
    dur = numbers(tab, "duration_s") if not tab.empty else pd.Series(dtype=float)
    s.put("pauses_total", len(tab))
    s.put("pause_s_total", float(dur.sum()))
    if not tab.empty:
        s.put("pause_s_by_port", {str(k): float(v) for k, v in tab.assign(d=dur).groupby("port")["d"].sum().items()})
