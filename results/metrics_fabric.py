"""Fabric-side metrics of one run: queues, link utilization, ECMP balance, TCP counters (see results.metrics)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from results.record import Run
from results.summary import Summary

UTIL_WINDOW_S = 0.1  # link utilization max is taken over windows of at least this length (1 ms samples are noisy)
SPINE_LAYERS = ("spine", "core")


def _series(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by ``node:dev`` and sorted by time."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if isinstance(r.get("t"), (int, float)):
            out[f"{r['node']}:{r['dev']}"].append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r["t"])
    return dict(sorted(out.items()))


def _delta(rows: list[dict[str, Any]], col: str) -> float | None:
    vals = [r[col] for r in rows if isinstance(r.get(col), (int, float))]
    return float(vals[-1] - vals[0]) if vals else None


def queues(run: Run, s: Summary) -> None:
    names = ("drops_total", "overlimits_total", "queue_backlog_max_bytes", "queue_backlog_p99_bytes", "queues")
    table = run.table("queues")
    series = _series(table)
    marker = run.table("marks")
    marker_marks = sum(float(r["marks"]) for r in marker if isinstance(r.get("marks"), (int, float)))
    if not series:
        for m in names:
            s.na(m, f"no queue samples: {table.reason or 'queues.csv is empty'}")
        if marker:
            s.put("marks_total", marker_marks)
        else:
            s.na("marks_total", f"no queue samples and no marker counters ({marker.reason})")
        return
    per: dict[str, dict[str, Any]] = {}
    for key, rs in series.items():
        backlog = np.array([r["backlog_bytes"] for r in rs if isinstance(r.get("backlog_bytes"), (int, float))], float)
        per[key] = {
            "samples": len(rs),
            "drops": _delta(rs, "drops"),
            "marks": _delta(rs, "marks"),
            "overlimits": _delta(rs, "overlimits"),
            "tx_bytes": _delta(rs, "tx_bytes"),
            "backlog_max_bytes": float(backlog.max()) if backlog.size else None,
            "backlog_p99_bytes": float(np.percentile(backlog, 99)) if backlog.size else None,
        }
    s.put("queues", per)
    for metric, col in (("drops_total", "drops"), ("overlimits_total", "overlimits")):
        s.put(metric, sum(q[col] or 0 for q in per.values()))
    s.put("marks_total", sum(q["marks"] or 0 for q in per.values()) + marker_marks)
    maxes = [q["backlog_max_bytes"] for q in per.values() if q["backlog_max_bytes"] is not None]
    p99s = [q["backlog_p99_bytes"] for q in per.values() if q["backlog_p99_bytes"] is not None]
    if maxes:
        s.put("queue_backlog_max_bytes", max(maxes))
        s.put("queue_backlog_p99_bytes", max(p99s))
        s.put("hottest_queue", max(per, key=lambda k: per[k]["backlog_max_bytes"] or 0))
    else:
        s.na("queue_backlog_max_bytes", "queues.csv has no backlog_bytes values")
        s.na("queue_backlog_p99_bytes", "queues.csv has no backlog_bytes values")
    t = [r["t"] for rs in series.values() for r in rs]
    intervals = [np.diff([r["t"] for r in rs]) for rs in series.values() if len(rs) > 2]
    if intervals:
        d = np.concatenate(intervals)
        s.put(
            "queue_sampling",
            {"rate_hz": float(1 / d.mean()), "jitter": float(d.std() / d.mean()), "span_s": float(max(t) - min(t))},
        )


def _ports(run: Run) -> dict[str, dict[str, Any]]:
    ports = (run.manifest.get("fabric") or {}).get("ports") or []
    return {f"{p['node']}:{p['dev']}": p for p in ports if "node" in p and "dev" in p}


def _util_max(rs: list[dict[str, Any]], rate: float) -> float:
    best, i0 = 0.0, 0
    for i in range(1, len(rs)):
        dt = rs[i]["t"] - rs[i0]["t"]
        if dt >= UTIL_WINDOW_S or i == len(rs) - 1:
            if dt > 0:
                best = max(best, (rs[i]["tx_bytes"] - rs[i0]["tx_bytes"]) * 8 / dt / rate)
            i0 = i
    return best


def links(run: Run, s: Summary) -> None:
    table = run.table("links")
    ports = _ports(run)
    series = _series(table)
    if not series or not ports:
        why = (table.reason or "links.csv is empty") if not series else "the manifest has no fabric.ports (rates)"
        s.na("link_util_mean", why)
        s.na("link_util_max", why)
        s.na("links", why)
        return
    per: dict[str, dict[str, Any]] = {}
    skipped = []
    for key, rs in series.items():
        rate = (ports.get(key) or {}).get("rate_bps")
        rs = [r for r in rs if isinstance(r.get("tx_bytes"), (int, float))]
        span = rs[-1]["t"] - rs[0]["t"] if len(rs) > 1 else 0
        if not rate or span <= 0:
            skipped.append(key)
            continue
        tx = rs[-1]["tx_bytes"] - rs[0]["tx_bytes"]
        per[key] = {
            "tx_bytes": tx,
            "rate_bps": rate,
            "util_mean": tx * 8 / span / rate,
            "util_max": _util_max(rs, rate),
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


def _port_bytes(run: Run) -> tuple[dict[str, float], str]:
    """tx bytes per ``node:dev`` over the run: from links.csv, else from queues.csv."""
    for name in ("links", "queues"):
        series = _series(run.table(name))
        out = {k: d for k, rs in series.items() if (d := _delta(rs, "tx_bytes")) is not None}
        if out:
            return out, name
    return {}, ""


def ecmp(run: Run, s: Summary) -> None:
    ports = _ports(run)
    if not ports:
        for m in ("ecmp_imbalance", "ecmp_groups", "bytes_per_spine"):
            s.na(m, "the manifest has no fabric.ports")
        return
    groups: dict[str, list[str]] = defaultdict(list)
    for key, p in ports.items():
        if p.get("direction") == "up":
            groups[str(p["node"])].append(key)
    groups = {n: ks for n, ks in groups.items() if len(ks) >= 2}
    sent, source = _port_bytes(run)
    if not sent:
        for m in ("ecmp_imbalance", "ecmp_groups", "bytes_per_spine"):
            s.na(m, "no tx_bytes counters in links.csv or queues.csv")
        return
    per: dict[str, Any] = {}
    for node, keys in sorted(groups.items()):
        b = {k.split(":", 1)[1]: sent[k] for k in sorted(keys) if k in sent}
        if len(b) >= 2 and sum(b.values()) > 0:
            per[node] = {"bytes": b, "imbalance": max(b.values()) / (sum(b.values()) / len(b))}
    if per:
        s.put("ecmp_groups", per)
        s.put("ecmp_imbalance", max(g["imbalance"] for g in per.values()))
        s.put("ecmp_source", source)
    else:
        why = (
            "the fabric has no node with 2 or more up ports (no parallel uplinks)"
            if not groups
            else "no traffic was counted on any group of parallel uplinks"
        )
        s.na("ecmp_imbalance", why)
        s.na("ecmp_groups", why)
    spines: dict[str, float] = defaultdict(float)
    for key, p in ports.items():
        if p.get("direction") == "up" and p.get("peer_layer") in SPINE_LAYERS and key in sent:
            spines[str(p["peer"])] += sent[key]
    if spines:
        s.put("bytes_per_spine", dict(sorted(spines.items())))
    else:
        s.na("bytes_per_spine", f"no counted up port whose peer layer is one of {SPINE_LAYERS}")


COUNTERS = {
    "retrans_total": "Tcp.RetransSegs",
    "timeouts_total": "TcpExt.TCPTimeouts",
    "ce_delivered_total": "TcpExt.TCPDeliveredCE",
    "ce_received_pkts_total": "IpExt.InCEPkts",
}


def netstat(run: Run, s: Summary) -> None:
    table = run.table("netstat")
    vals: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for r in table:
        if isinstance(r.get("value"), (int, float)):
            vals[(str(r["host"]), str(r["counter"]))][str(r["phase"])] = float(r["value"])
    deltas: dict[str, dict[str, float]] = defaultdict(dict)
    for (host, counter), ph in vals.items():
        if "start" in ph and "end" in ph:
            deltas[host][counter] = ph["end"] - ph["start"]
    if deltas:
        s.put("tcp_per_host", dict(sorted(deltas.items())))
    for metric, counter in COUNTERS.items():
        have = [d[counter] for d in deltas.values() if counter in d]
        if have:
            s.put(metric, sum(have))
        elif not table:
            s.na(metric, f"no TCP counters: {table.reason}")
        else:
            s.na(metric, f"netstat.csv has no start and end value of {counter}")
