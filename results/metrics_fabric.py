"""Fabric-side metrics of one run: queues, link utilization, PFC pauses (see results.metrics; ECMP balance is in
``results.metrics_ecmp``, TCP counters in ``results.metrics_tcp``).

Counters are cumulative, so a port's figure over the run is its last reading less its first, over the port's rows
in time order (``results.ports``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from results import queues_kernel
from results.ports import PortRows, first_last, split_ports
from results.record import Run
from results.summary import Summary
from results.tables import numbers, reason

UTIL_WINDOW_S = 0.1  # link utilization max is taken over windows of at least this length (1 ms samples are noisy)


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
        per: dict[str, dict[str, Any]] = {}
        for key, rs in series.items():
            backlog = rs["backlog_bytes"][~np.isnan(rs["backlog_bytes"])]
            per[key] = {
                "samples": len(rs["t"]),
                **{c: _delta(rs[c]) for c in COUNTERS_Q},
                "backlog_max_bytes": float(backlog.max()) if backlog.size else None,
                "backlog_p99_bytes": float(np.percentile(backlog, 99)) if backlog.size else None,
            }
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
        s.put("queue_backlog_p99_bytes", max(p99s))
        s.put("hottest_queue", max(per, key=lambda k: per[k]["backlog_max_bytes"] or 0))
    else:
        s.na("queue_backlog_max_bytes", f"the {source} telemetry has no backlog values")
        s.na("queue_backlog_p99_bytes", f"the {source} telemetry has no backlog values")


def _ports(run: Run) -> dict[str, dict[str, Any]]:
    ports = (run.manifest.get("fabric") or {}).get("ports") or []
    return {f"{p['node']}:{p['dev']}": p for p in ports if "node" in p and "dev" in p}


def util_max(t: np.ndarray, tx: np.ndarray, rate: float) -> float:
    """The highest rate / ``rate`` over consecutive windows of at least UTIL_WINDOW_S (the last one may be shorter),
    each starting where the one before ended; a binary search finds each window's end."""
    best, i0, n = 0.0, 0, len(t)
    while i0 < n - 1:
        i = max(int(np.searchsorted(t, t[i0] + UTIL_WINDOW_S, "left")), i0 + 1)
        while i > i0 + 1 and t[i - 1] - t[i0] >= UTIL_WINDOW_S:  # the test is on the difference, as the sum rounds
            i -= 1
        while i < n and t[i] - t[i0] < UTIL_WINDOW_S:
            i += 1
        i = min(i, n - 1)
        dt = t[i] - t[i0]
        if dt > 0:
            best = max(best, float((tx[i] - tx[i0]) * 8 / dt / rate))
        i0 = i
    return best


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
    for key, rs in series.items():
        rate = (ports.get(key) or {}).get("rate_bps")
        counted = ~np.isnan(rs["tx_bytes"])
        t, tx = rs["t"][counted], rs["tx_bytes"][counted]
        span = t[-1] - t[0] if len(t) > 1 else 0
        if not rate or span <= 0:
            skipped.append(key)
            continue
        nbytes = float(tx[-1] - tx[0])
        per[key] = {
            "tx_bytes": nbytes,
            "rate_bps": rate,
            "util_mean": nbytes * 8 / span / rate,
            "util_max": util_max(t, tx, rate),
            "layer": ports[key].get("layer"),
            "direction": ports[key].get("direction"),
        }
    if not per:
        why = f"no port in links.csv has a rate in fabric.ports and two samples ({len(skipped)} skipped)"
        s.na("link_util_mean", why)
        s.na("link_util_max", why)
        s.na("links", why)
        return
    s.put("links", per)
    s.put("link_util_mean", float(np.mean([p["util_mean"] for p in per.values()])))
    s.put("link_util_max", float(max(p["util_max"] for p in per.values())))
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
