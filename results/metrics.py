"""Metrics of one run: pure functions from a ``Run`` (its tables and manifest) to a flat summary dict.

``summarize(run)`` returns ``{"schema", "run_id", "status", <metric>: value, ..., "not_applicable": {metric:
reason}}``: every metric in ``METRICS`` is present, either computed or None with the reason it could not be.
Application-level metrics (goodput, collectives, FCT, RTT, fairness, traffic matrix) are here; queue, link,
ECMP and TCP counter metrics are in ``results.metrics_fabric``. Definitions: docs/record-format.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from results import metrics_fabric
from results.record import SUMMARY, Run, RunRecord, load_run, write_json_atomic
from results.stats import jain_index, percentiles
from results.summary import Summary

SUMMARY_SCHEMA = "testbed-summary/1"


def _span(rows: list[dict[str, Any]]) -> float | None:
    starts = [r["t_start"] for r in rows if isinstance(r.get("t_start"), (int, float))]
    ends = [r["t_end"] for r in rows if isinstance(r.get("t_end"), (int, float))]
    if not starts or not ends or max(ends) <= min(starts):
        return None
    return float(max(ends) - min(starts))


def goodput(run: Run, s: Summary) -> None:
    flows = run.table("flows")
    done = [r for r in flows if isinstance(r.get("bytes"), (int, float))]
    if not done:
        reason = flows.reason or "no flow has a byte count"
        for m in ("goodput_bps", "goodput_per_job_bps", "jain_fairness"):
            s.na(m, f"no flows: {reason}")
        return
    span = _span(done)
    if span is None:
        s.na("goodput_bps", "flows.csv has no usable t_start/t_end")
    else:
        s.put("goodput_bps", sum(r["bytes"] for r in done) * 8 / span)
    per_job: dict[str, float] = {}
    for job in sorted({str(r["job"]) for r in done}):
        rows = [r for r in done if str(r["job"]) == job]
        js = _span(rows)
        if js:
            per_job[job] = sum(r["bytes"] for r in rows) * 8 / js
    if per_job:
        s.put("goodput_per_job_bps", per_job)
    else:
        s.na("goodput_per_job_bps", "no job has usable flow times")
    rates = []
    for r in done:
        if isinstance(r.get("goodput_bps"), (int, float)):
            rates.append(float(r["goodput_bps"]))
        elif (
            isinstance(r.get("t_end"), (int, float))
            and isinstance(r.get("t_start"), (int, float))
            and r["t_end"] > r["t_start"]
        ):
            rates.append(r["bytes"] * 8 / (r["t_end"] - r["t_start"]))
    try:
        if len(rates) < 2:
            raise ValueError(f"needs at least 2 flows with a rate, has {len(rates)}")
        s.put("jain_fairness", jain_index(rates))
    except ValueError as exc:
        s.na("jain_fairness", str(exc))
    s.put("flows_n", len(done))


def _collective_stats(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    t = np.array([r["t_end"] - r["t_start"] for r in rows], dtype=float)
    p50, p99 = percentiles(t, [50, 99])
    size = np.array([r.get("size_bytes") or np.nan for r in rows], dtype=float)
    algbw = size * 8 / t
    factor = np.array([np.nan if r.get("busbw_factor") is None else r["busbw_factor"] for r in rows], dtype=float)
    ideal = np.array([np.nan if r.get("ideal_s") is None else r["ideal_s"] for r in rows], dtype=float)
    out: dict[str, float | None] = {"n": float(t.size), "p50_s": p50, "p99_s": p99, "max_s": float(t.max())}
    out["algbw_bps"] = float(np.nanmedian(algbw)) if np.isfinite(algbw).any() else None
    busbw = algbw * factor
    out["busbw_bps"] = float(np.nanmedian(busbw)) if np.isfinite(busbw).any() else None
    ratio = t / ideal
    out["measured_over_ideal"] = float(np.nanmedian(ratio)) if np.isfinite(ratio).any() else None
    return out


def collectives(run: Run, s: Summary) -> None:
    names = (
        "coll_iter_p50_s",
        "coll_iter_p99_s",
        "coll_iter_max_s",
        "algbw_bps",
        "busbw_bps",
        "measured_over_ideal",
        "collective_per_job",
    )
    table = run.table("iterations")
    rows = [
        r
        for r in table
        if not r.get("warmup")
        and isinstance(r.get("t_end"), (int, float))
        and isinstance(r.get("t_start"), (int, float))
    ]
    if not rows:
        reason = table.reason or "only warm-up iterations were recorded"
        for m in names:
            s.na(m, f"no measured collective iterations: {reason}")
        return
    st = _collective_stats(rows)
    s.put("coll_iters_n", int(st["n"] or 0))
    s.put("coll_iter_p50_s", st["p50_s"])
    s.put("coll_iter_p99_s", st["p99_s"])
    s.put("coll_iter_max_s", st["max_s"])
    for key, why in (
        ("algbw_bps", "iterations.csv has no size_bytes"),
        ("busbw_bps", "no size_bytes/busbw_factor"),
        ("measured_over_ideal", "iterations.csv has no ideal_s"),
    ):
        if st[key] is None:
            s.na(key, why)
        else:
            s.put(key, st[key])
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_job[str(r["job"])].append(r)
    s.put("collective_per_job", {job: _collective_stats(rs) for job, rs in sorted(by_job.items())})


def fct(run: Run, s: Summary) -> None:
    names = ("fct_p50_s", "fct_p99_s", "fct_p999_s", "fct_by_class")
    table = run.table("fct")
    done = [r for r in table if isinstance(r.get("t_end"), (int, float)) and isinstance(r.get("t_start"), (int, float))]
    if not done:
        for m in names:
            s.na(m, f"no completed flows: {table.reason or 'fct.csv has no finished flow'}")
        return
    t = np.array([r["t_end"] - r["t_start"] for r in done], dtype=float)
    p50, p99, p999 = percentiles(t, [50, 99, 99.9])
    s.put("fct_p50_s", p50)
    s.put("fct_p99_s", p99)
    s.put("fct_p999_s", p999)
    s.put("fct_n", len(done))
    s.put("fct_unfinished", len(table) - len(done))
    classes: dict[str, list[float]] = defaultdict(list)
    for r, d in zip(done, t, strict=True):
        classes[str(r.get("size_class") or "all")].append(float(d))
    by_class = {}
    for cls, vals in sorted(classes.items()):
        c50, c99, c999 = percentiles(vals, [50, 99, 99.9])
        by_class[cls] = {"n": len(vals), "p50_s": c50, "p99_s": c99, "p999_s": c999}
    s.put("fct_by_class", by_class)


def load_window(run: Run) -> tuple[float, float] | None:
    """[first start, last end] of the traffic (flows, iterations, fct, pipeline): the 'under load' window."""
    lo, hi = np.inf, -np.inf
    for name in ("flows", "iterations", "fct", "pipeline"):
        for r in run.table(name):
            a, b = r.get("t_start"), r.get("t_end")
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                lo, hi = min(lo, a), max(hi, b)
    return (float(lo), float(hi)) if hi > lo else None


def rtt(run: Run, s: Summary) -> None:
    table = run.table("rtt")
    window = load_window(run)
    rows: list[dict[str, Any]] = list(table)
    if window is not None:
        rows = [r for r in table if isinstance(r.get("t_send"), (int, float)) and window[0] <= r["t_send"] <= window[1]]
    vals = [float(r["rtt_s"]) for r in rows if isinstance(r.get("rtt_s"), (int, float))]
    if not vals:
        why = table.reason or ("no probe sample falls inside the traffic window" if window else "no probe answered")
        s.na("rtt_p50_s", f"no RTT samples under load: {why}")
        s.na("rtt_p99_s", f"no RTT samples under load: {why}")
        return
    p50, p99 = percentiles(vals, [50, 99])
    s.put("rtt_p50_s", p50)
    s.put("rtt_p99_s", p99)
    s.put("rtt_n", len(vals))
    s.put("rtt_lost", len(rows) - len(vals))


def _host_names(run: Run) -> dict[str, str]:
    nodes = (run.manifest.get("fabric") or {}).get("nodes") or []
    return {str(n["ip"]): str(n["name"]) for n in nodes if n.get("ip")}


def _rank_host(run: Run, job: str, rank: Any) -> str:
    """A collective rank's host from manifest["ranks"][job] (list by rank), else ``<job>:rank<N>``."""
    hosts = (run.manifest.get("ranks") or {}).get(job)
    if isinstance(rank, int) and isinstance(hosts, list) and 0 <= rank < len(hosts):
        return str(hosts[rank])
    return f"{job}:rank{rank}" if isinstance(rank, int) else str(rank)


def traffic_matrix(run: Run, s: Summary) -> None:
    """Bytes src -> dst from flows.csv, plus steps.csv sends of jobs that wrote no flows (no double counting)."""
    by_ip = _host_names(run)
    matrix: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    flow_jobs = set()
    for r in run.table("flows"):
        if isinstance(r.get("bytes"), (int, float)):
            flow_jobs.add(str(r["job"]))
            src, dst = str(r["src"]), str(r["dst"])
            matrix[by_ip.get(src, src)][by_ip.get(dst, dst)] += float(r["bytes"])
    for r in run.table("steps"):
        if str(r.get("job")) in flow_jobs or r.get("op") != "send" or not isinstance(r.get("bytes"), (int, float)):
            continue
        job = str(r["job"])
        matrix[_rank_host(run, job, r.get("rank"))][_rank_host(run, job, r.get("peer"))] += float(r["bytes"])
    if not matrix:
        s.na("traffic_matrix", "neither flows.csv nor steps.csv recorded bytes between hosts")
    else:
        s.put("traffic_matrix", {a: dict(sorted(b.items())) for a, b in sorted(matrix.items())})


def duration(run: Run, s: Summary) -> None:
    window = load_window(run)
    if window is None:
        s.na("traffic_duration_s", "no timed traffic rows")
    else:
        s.put("traffic_duration_s", window[1] - window[0])


def cpu(run: Run, s: Summary) -> None:
    """The machine's CPU over the traffic window (the fidelity check's reading of cpu.csv) and the harness's own
    share of it (manifest ``cpu_budget``)."""
    checks = {c.get("name"): c for c in (run.manifest.get("fidelity") or {}).get("checks") or []}
    sat = checks.get("cpu_saturation") or {}
    budget = run.manifest.get("cpu_budget") or {}
    mean = (sat.get("details") or {}).get("mean_busy", budget.get("busy_share"))
    for name, value, why in (
        ("cpu_mean", mean, "no cpu.csv samples in the traffic window and no cpu_budget"),
        ("cpu_saturated_share", sat.get("value"), "no cpu_saturation check in the manifest's fidelity"),
        ("harness_cpu_share", budget.get("harness_share"), "no cpu_budget in the manifest (recorded since 6777468)"),
    ):
        if value is None:
            s.na(name, why)
        else:
            s.put(name, float(value))


def _fabric_metrics() -> list[Callable[[Run, Summary], None]]:
    return [metrics_fabric.queues, metrics_fabric.links, metrics_fabric.ecmp, metrics_fabric.netstat]


def summarize(run: Run) -> dict[str, Any]:
    s = Summary()
    s.update({"schema": SUMMARY_SCHEMA, "run_id": run.run_id, "status": run.status})
    for fn in [goodput, collectives, fct, rtt, traffic_matrix, duration, cpu, *_fabric_metrics()]:
        fn(run, s)
    na = s.pop("not_applicable")
    s["not_applicable"] = na  # keep it last in the JSON for readability
    return dict(s)


def write_summary(run: Run) -> dict[str, Any]:
    summary = summarize(run)
    write_json_atomic(run.path / SUMMARY, summary)
    return summary


def finish_run(record: RunRecord, status: str = "complete", error: str | None = None) -> None:
    """Finish the record, then write summary.json from its tables; a summary that fails is named in the manifest
    (``summary_error``) and raised."""
    record.finish(status, error)
    try:
        write_summary(load_run(record.path))
    except Exception as exc:
        record.set("summary_error", f"{type(exc).__name__}: {exc}")
        raise


# The headline metrics every summary carries (computed or not applicable), in table order.
METRICS = (
    "goodput_bps",
    "goodput_per_job_bps",
    "coll_iter_p50_s",
    "coll_iter_p99_s",
    "coll_iter_max_s",
    "algbw_bps",
    "busbw_bps",
    "measured_over_ideal",
    "fct_p50_s",
    "fct_p99_s",
    "fct_p999_s",
    "fct_by_class",
    "rtt_p50_s",
    "rtt_p99_s",
    "drops_total",
    "marks_total",
    "overlimits_total",
    "queue_backlog_max_bytes",
    "queue_backlog_p99_bytes",
    "link_util_mean",
    "link_util_max",
    "ecmp_imbalance",
    "bytes_per_spine",
    "retrans_total",
    "timeouts_total",
    "jain_fairness",
    "traffic_matrix",
    "cpu_mean",
    "cpu_saturated_share",
    "harness_cpu_share",
)
