"""Metrics of one run: pure functions from a ``Run`` (its tables and manifest) to a flat summary dict.

``summarize(run)`` returns ``{"schema", "run_id", "status", <metric>: value, ..., "samples": {metric: n},
"not_applicable": {metric: reason}}``: every metric in ``METRICS`` is present, either computed or None with the
reason it could not be; a statistic of samples names how many it rests on in ``samples``, and a percentile the
sample cannot support is None (``results.summary``).
Application-level metrics (goodput, collectives, FCT, RTT, fairness, traffic matrix) are here; queue, link
and pause metrics are in ``results.metrics.fabric``, ECMP balance in ``results.metrics.ecmp``, TCP counters in
``results.metrics.tcp``. Definitions: docs/record-format.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from results import nccl_tests
from results.metrics import ecmp as metrics_ecmp
from results.metrics import fabric as metrics_fabric
from results.metrics import tcp as metrics_tcp
from results.metrics import trace as metrics_trace
from results.metrics.classes import class_of_jobs
from results.record import NCCL_TESTS, SUMMARY, Run, RunRecord, load_run, write_json_atomic
from results.stats import jain_index, percentiles, supported_percentiles, supported_quantile
from results.summary import Summary, percentile_fields
from results.tables import numbers, reason, records

SUMMARY_SCHEMA = "testbed-summary/4"


def _timed(df: pd.DataFrame, start: str = "t_start", end: str = "t_end") -> pd.Series:
    """Rows whose start and end are both numbers."""
    return numbers(df, start).notna() & numbers(df, end).notna()


def _span(df: pd.DataFrame) -> float | None:
    starts, ends = numbers(df, "t_start").dropna(), numbers(df, "t_end").dropna()
    if starts.empty or ends.empty or ends.max() <= starts.min():
        return None
    return float(ends.max() - starts.min())


def goodput(run: Run, s: Summary) -> None:
    flows = run.table("flows")
    done = flows[numbers(flows, "bytes").notna()]
    if done.empty:
        why = reason(flows) or "no flow has a byte count"
        for m in ("goodput_bps", "goodput_per_job_bps", "jain_fairness"):
            s.na(m, f"no flows: {why}")
        return
    nbytes = numbers(done, "bytes")
    span = _span(done)
    if span is None:
        s.na("goodput_bps", "flows.csv has no usable t_start/t_end")
    else:
        s.put("goodput_bps", float(nbytes.sum()) * 8 / span)
    per_job: dict[str, float] = {}
    for job, rows in done.groupby(done["job"].astype(str), sort=True):
        js = _span(rows)
        if js:
            per_job[str(job)] = float(numbers(rows, "bytes").sum()) * 8 / js
    if per_job:
        s.put("goodput_per_job_bps", per_job)
    else:
        s.na("goodput_per_job_bps", "no job has usable flow times")
    t0, t1 = numbers(done, "t_start"), numbers(done, "t_end")
    own = numbers(done, "goodput_bps")
    rates = own.where(own.notna(), (nbytes * 8 / (t1 - t0)).where(t1 > t0)).dropna()
    try:
        if len(rates) < 2:
            raise ValueError(f"needs at least 2 flows with a rate, has {len(rates)}")
        s.put("jain_fairness", jain_index(rates.to_numpy()), n=len(rates))
    except ValueError as exc:
        s.na("jain_fairness", str(exc))
    s.put("flows_n", len(done))


P50_P99 = {"p50_s": 50, "p99_s": 99}


def _nccl_bandwidth(rows: pd.DataFrame) -> tuple[float | None, float | None]:
    """nccl-tests' algbw and busbw (bit/s) of the rows' iterations: per job and size, its size over its mean
    iteration time, the busbw with the job's factor (``nccl_tests.bandwidth``); the mean over those when the rows
    hold several (None where no row has a size, or for busbw a factor)."""
    secs = numbers(rows, "t_end") - numbers(rows, "t_start")
    size = numbers(rows, "size_bytes").replace(0, np.nan)  # a size of 0 is unknown
    timed = rows.assign(secs=secs, size=size)[(secs > 0) & size.notna()]
    alg, bus = [], []
    for (_, nbytes), per in timed.groupby([timed["job"].astype(str), "size"], sort=True):
        _, algbw, busbw = nccl_tests.bandwidth(float(nbytes), per["secs"].to_numpy(), nccl_tests.factor_of(per))
        alg.append(algbw * 8)
        if np.isfinite(busbw):
            bus.append(busbw * 8)
    return (float(np.mean(alg)) if alg else None), (float(np.mean(bus)) if bus else None)


def _collective_stats(rows: pd.DataFrame) -> dict[str, Any]:
    """The iteration figures of ``rows`` (one job, or every job's at the run level): ``n``; the time's p50 and p99
    (None where ``n`` cannot support them), mean and max; nccl-tests' algbw and busbw (from the mean time) and the
    median iteration's; the median of time / ideal. None where a figure cannot be computed, with its reason under
    ``not_applicable``."""
    t = (numbers(rows, "t_end") - numbers(rows, "t_start")).to_numpy()
    out = percentile_fields(t, P50_P99)
    why: dict[str, str] = out.pop("not_applicable", {})
    out["mean_s"], out["max_s"] = float(t.mean()), float(t.max())
    # what stalls cost: the time every iteration took beyond the median one, summed (a link failure's, a flap's)
    out["excess_s"] = float(np.clip(t - np.median(t), 0, None).sum())
    out["algbw_bps"], out["busbw_bps"] = _nccl_bandwidth(rows)
    if out["algbw_bps"] is None:
        why["algbw_bps"] = "iterations.csv has no size_bytes"
    if out["busbw_bps"] is None:
        why["busbw_bps"] = "no size_bytes/busbw_factor"
    algbw = numbers(rows, "size_bytes").replace(0, np.nan).to_numpy() * 8 / t  # a size of 0 is unknown
    factor = numbers(rows, "busbw_factor").to_numpy()
    ideal = numbers(rows, "ideal_s").to_numpy()
    medians = {
        "algbw_median_iter_bps": (algbw, "iterations.csv has no size_bytes"),
        "busbw_median_iter_bps": (algbw * factor, "no size_bytes/busbw_factor"),
        "measured_over_ideal": (t / ideal, "iterations.csv has no ideal_s"),
    }
    compute = numbers(rows, "compute_s").to_numpy()
    if np.isfinite(compute).any():  # a trace or DDP step: what it took beyond its compute alone
        medians["exposed_comm_s"] = (t - compute, "")
        medians["exposed_comm_share"] = ((t - compute) / t, "")
    for key, (values, none) in medians.items():
        out[key], reason_ = _median(values, none)
        if reason_:
            why[key] = reason_
    if why:
        out["not_applicable"] = why
    return out


def _largest_size(rows: pd.DataFrame) -> pd.Series:
    """Each job's iterations of its largest size: a size sweep's headline figures are its bandwidth-bound end."""
    size = numbers(rows, "size_bytes").fillna(0)
    return size == size.groupby(rows["job"].astype(str)).transform("max")


def _median(a: np.ndarray, none: str) -> tuple[float | None, str | None]:
    """The median of the finite values (NaN ignored) and None, or None and why: ``none`` when no value is finite,
    the sample-size rule's reason (``results.stats.supported_quantile``) when there is one value."""
    (value,), (why,), n = supported_percentiles(a[np.isfinite(a)], [50])
    if n == 0:
        return None, none
    return value, why


def collectives(run: Run, s: Summary) -> None:
    names = (
        "coll_iter_p50_s",
        "coll_iter_p99_s",
        "coll_iter_mean_s",
        "coll_iter_max_s",
        "algbw_bps",
        "busbw_bps",
        "algbw_median_iter_bps",
        "busbw_median_iter_bps",
        "measured_over_ideal",
        "collective_per_job",
    )
    table = run.table("iterations")
    warm = numbers(table, "warmup").fillna(0) != 0
    rows = table[~warm & _timed(table)]
    if rows.empty:
        why = reason(table) or "only warm-up iterations were recorded"
        for m in (*names, "nccl_tests"):
            s.na(m, f"no measured collective iterations: {why}")
        return
    tables = nccl_tests.size_tables(rows, (run.manifest.get("scale") or {}).get("factor"))
    if tables:
        s.put("nccl_tests", tables)
    else:
        s.na("nccl_tests", "no collective job (no busbw factor)")
    rows = rows[_largest_size(rows)]
    st = _collective_stats(rows)
    n = int(st["n"])
    why = st.get("not_applicable", {})
    s.put("coll_iters_n", n)
    for key, stat in (
        ("coll_iter_p50_s", "p50_s"),
        ("coll_iter_p99_s", "p99_s"),
        ("coll_iter_mean_s", "mean_s"),
        ("coll_iter_max_s", "max_s"),
        ("coll_excess_s", "excess_s"),
        ("algbw_bps", "algbw_bps"),
        ("busbw_bps", "busbw_bps"),
        ("algbw_median_iter_bps", "algbw_median_iter_bps"),
        ("busbw_median_iter_bps", "busbw_median_iter_bps"),
        ("measured_over_ideal", "measured_over_ideal"),
        ("exposed_comm_s", "exposed_comm_s"),
        ("exposed_comm_share", "exposed_comm_share"),
    ):
        if stat not in st:  # exposed_comm_*: only where a job replayed a step with compute
            continue
        if st[stat] is None:
            s.na(key, why[stat], n=n)
        else:
            s.put(key, st[stat], n=n)
    by_job = rows.groupby(rows["job"].astype(str), sort=True)
    s.put("collective_per_job", {str(job): _collective_stats(rs) for job, rs in by_job})


FCT_PERCENTILES = {"fct_p50_s": 50, "fct_p99_s": 99, "fct_p999_s": 99.9}
CLASS_PERCENTILES = {"p50_s": 50, "p99_s": 99, "p999_s": 99.9}


def fct(run: Run, s: Summary) -> None:
    names = ("fct_p50_s", "fct_p99_s", "fct_p999_s", "fct_by_class")
    table = run.table("fct")
    done = table[_timed(table)]
    if done.empty:
        for m in names:
            s.na(m, f"no completed flows: {reason(table) or 'fct.csv has no finished flow'}")
        return
    t = numbers(done, "t_end") - numbers(done, "t_start")
    s.percentiles(t.to_numpy(), FCT_PERCENTILES)
    s.put("fct_n", len(done))
    s.put("fct_unfinished", len(table) - len(done))
    size_class = done["size_class"] if "size_class" in done.columns else pd.Series(np.nan, index=done.index)
    classes = size_class.where(size_class.notna() & (size_class.astype(str) != ""), "all").astype(str)
    by_class = {str(cls): percentile_fields(vals.to_numpy(), CLASS_PERCENTILES) for cls, vals in t.groupby(classes)}
    s.put("fct_by_class", dict(sorted(by_class.items())))
    traffic = class_of_jobs(run.manifest)
    if traffic:  # a fabric with traffic classes: each class's flows, by their job's DSCP
        per = {
            str(c): percentile_fields(vals.to_numpy(), P50_P99)
            for c, vals in t.groupby(done["job"].astype(str).map(traffic).fillna("?"), sort=True)
        }
        s.put("fct_by_traffic_class", per)


def load_window(run: Run) -> tuple[float, float] | None:
    """[first start, last end] of the traffic (flows, iterations, fct, pipeline): the 'under load' window."""
    lo, hi = np.inf, -np.inf
    for name in ("flows", "iterations", "fct", "pipeline"):
        df = run.table(name)
        both = df[_timed(df)]
        if not both.empty:
            lo, hi = min(lo, numbers(both, "t_start").min()), max(hi, numbers(both, "t_end").max())
    return (float(lo), float(hi)) if hi > lo else None


def rtt(run: Run, s: Summary) -> None:
    """The probes sent inside the traffic window (all of them when no traffic table has times). A probe never
    answered counts as an infinite round trip, so a percentile is over every probe sent: ``rtt_p99_s`` is the time
    within which 99% of them were answered, null when more than 1% were lost (docs/statistics.md, "RTT under
    load"); ``rtt_n`` answered, ``rtt_lost`` not, ``rtt_send_late_max_s`` the most a probe went out after its slot."""
    table = run.table("rtt")
    window = load_window(run)
    rows = table
    if window is not None:
        sent = numbers(table, "t_send")
        rows = table[(sent >= window[0]) & (sent <= window[1])]
    vals = numbers(rows, "rtt_s").dropna()
    if vals.empty:
        why = reason(table) or ("no probe sample falls inside the traffic window" if window else "no probe answered")
        s.na("rtt_p50_s", f"no RTT samples under load: {why}")
        s.na("rtt_p99_s", f"no RTT samples under load: {why}")
        return
    n, answered = len(rows), np.sort(vals.to_numpy())
    lost = n - answered.size
    for name, q in (("rtt_p50_s", 50.0), ("rtt_p99_s", 99.0)):
        rank = (n - 1) * q / 100  # numpy's linear rank among all n probes sent, the lost ones last
        short = supported_quantile(q, n)
        if short is None and rank > answered.size - 1:
            short = f"{lost} of {n} probes ({lost / n:.1%}) were never answered: more than {100 - q:g}% lost"
        if short is not None:
            s.na(name, short, n=n)
            continue
        level = q if lost == 0 else min(100.0, 100 * rank / max(answered.size - 1, 1))  # that rank among answers
        s.put(name, percentiles(answered, [level])[0], n=n)
    s.put("rtt_n", int(answered.size))
    s.put("rtt_lost", lost)
    late = numbers(rows, "send_late_s").dropna()
    if not late.empty:  # a record of a prober that keeps its schedule (traffic/rtt_probe.py)
        s.put("rtt_send_late_max_s", float(late.max()))


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
    flows = run.table("flows")
    counted = flows[numbers(flows, "bytes").notna()]
    flow_jobs = set(counted["job"].astype(str)) if not counted.empty else set()
    for (src, dst), nbytes in numbers(counted, "bytes").groupby(
        [counted["src"].astype(str), counted["dst"].astype(str)]
    ):
        matrix[by_ip.get(src, src)][by_ip.get(dst, dst)] += float(nbytes.sum())
    steps = run.table("steps")
    if not steps.empty:
        sends = steps[
            (steps["op"] == "send") & numbers(steps, "bytes").notna() & ~steps["job"].astype(str).isin(flow_jobs)
        ]
        for r in records(sends):  # ranks are numbers or host names, so row by row; only jobs without flows.csv
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


def _fidelity_check(run: Run, name: str) -> dict[str, Any]:
    """The guardrail ``name`` as the manifest's fidelity verdict holds it (empty when the run has none)."""
    checks = (run.manifest.get("fidelity") or {}).get("checks") or []
    return next((c for c in checks if c.get("name") == name), {})


def cpu(run: Run, s: Summary) -> None:
    """The machine's CPU over the traffic window (the fidelity check's reading of cpu.csv) and the harness's own
    share of it (manifest ``cpu_budget``)."""
    sat = _fidelity_check(run, "cpu_saturation")
    budget = run.manifest.get("cpu_budget") or {}
    details = sat.get("details") or {}
    mean = details.get("mean_busy", budget.get("busy_share"))
    n = details.get("samples") if "mean_busy" in details else None  # cpu.csv's samples the check averaged
    for name, value, why, count in (
        ("cpu_mean", mean, "no cpu.csv samples in the traffic window and no cpu_budget", n),
        ("cpu_saturated_share", sat.get("value"), "no cpu_saturation check in the manifest's fidelity", n),
        (
            "harness_cpu_share",
            budget.get("harness_share"),
            "no cpu_budget in the manifest (recorded since 6777468)",
            None,
        ),
    ):
        if value is None:
            s.na(name, why)
        else:
            s.put(name, float(value), n=count)


def machine_stalls(run: Run, s: Summary) -> None:
    """The stall figures of the traffic window (the machine_stalls guardrail's): the share of it some CPU did not
    run (or the kernel's steal share, where larger), and the longest stall event."""
    c = _fidelity_check(run, "machine_stalls")
    fig = c.get("details") or {}
    if c.get("value") is None or not fig:
        why = "no machine_stalls check in the manifest's fidelity (no canary, or recorded before it)"
        s.na("machine_stalled_share", why)
        s.na("machine_stall_max_s", why)
        return
    s.put("machine_stalled_share", float(c["value"]), n=len(fig.get("events") or []))
    s.put("machine_stall_max_s", float(fig.get("longest_s") or 0.0), n=len(fig.get("events") or []))


def _fabric_metrics() -> list[Callable[[Run, Summary], None]]:
    return [
        metrics_fabric.queues,
        metrics_fabric.links,
        metrics_ecmp.ecmp,
        metrics_tcp.netstat,
        metrics_fabric.pauses,
    ]


def summarize(run: Run) -> dict[str, Any]:
    s = Summary()
    s.update({"schema": SUMMARY_SCHEMA, "run_id": run.run_id, "status": run.status})
    for fn in [goodput, collectives, metrics_trace.slowest_collective, fct, rtt, traffic_matrix, duration, cpu,
               machine_stalls, *_fabric_metrics()]:  # fmt: skip
        fn(run, s)
    return s.finished()


def write_summary(run: Run) -> dict[str, Any]:
    """summary.json, and nccl_tests.txt (the collective jobs in nccl-tests' layout) where the run has them."""
    summary = summarize(run)
    write_json_atomic(run.path / SUMMARY, summary)
    if summary.get("nccl_tests"):
        text = "".join(nccl_tests.format_table(job, t) for job, t in summary["nccl_tests"].items())
        (run.path / NCCL_TESTS).write_text(text)
    return summary


def finish_run(record: RunRecord, status: str = "complete", error: str | None = None, run: Run | None = None) -> None:
    """Finish the record, then write summary.json from its tables; a summary that fails is named in the manifest
    (``summary_error``) and raised. ``run``: the record as already read (by the fidelity evaluation), so each table
    is read once; its manifest is brought up to date first."""
    record.finish(status, error)
    try:
        if run is None:
            run = load_run(record.path)
        else:
            run.manifest = dict(record.manifest)
        write_summary(run)
    except Exception as exc:
        record.set("summary_error", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        record.hand_over()  # summary.json is new since finish handed the record over


# The headline metrics every summary carries (computed or not applicable), in table order.
METRICS = (
    "goodput_bps",
    "goodput_per_job_bps",
    "coll_iter_p50_s",
    "coll_iter_p99_s",
    "coll_iter_mean_s",
    "coll_iter_max_s",
    "algbw_bps",
    "busbw_bps",
    "algbw_median_iter_bps",
    "busbw_median_iter_bps",
    "measured_over_ideal",
    "fct_p50_s",
    "fct_p99_s",
    "fct_p999_s",
    "fct_by_class",
    "rtt_p50_s",
    "rtt_p99_s",
    "drops_total",
    "marks_total",
    "pauses_total",
    "pause_s_total",
    "overlimits_total",
    "queue_backlog_max_bytes",
    "queue_backlog_p99_bytes",
    "link_util_mean",
    "link_util_max",
    "ecmp_imbalance",
    "ecmp_imbalance_worst_group",
    "ecmp_worst_group",
    "bytes_per_spine",
    "retrans_total",
    "retrans_fast_total",
    "retrans_rto_total",
    "retrans_tlp_total",
    "retrans_spurious_total",
    "retrans_failed_total",
    "timeouts_total",
    "reorder_total",
    "dsack_total",
    "jain_fairness",
    "traffic_matrix",
    "cpu_mean",
    "cpu_saturated_share",
    "harness_cpu_share",
    "machine_stalled_share",
    "machine_stall_max_s",
)
