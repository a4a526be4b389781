"""Collective results in nccl-tests' own layout, so they sit line by line beside ``all_reduce_perf`` from a cluster.

One table per collective job, from its measured (not warm-up) iterations in iterations.csv: a line per message
size with ``size(B) count(elements) type redop root time(us) algbw(GB/s) busbw(GB/s) #wrong`` (nccl-tests'
out-of-place columns), then the ``# Avg bus bandwidth`` footer (the mean of the lines' busbw, as nccl-tests
computes it), and a line naming any size that ran faster than its links allow. As in nccl-tests: time is the mean over the size's iterations, algbw = size / time, busbw = algbw x
the collective's factor (2(n-1)/n all-reduce, (n-1)/n all-gather, reduce-scatter and all-to-all, 1 broadcast:
``traffic.formulas.busbw_factor``), GB = 1e9 bytes, elements are 4-byte floats. ``#wrong`` is ``N/A``: the workers
move bytes and reduce nothing, as nccl-tests prints it with ``-c 0``.

Units: a run whose fabric is scaled (``fabric.scale``: rates / F, sizes kept) shows real-world units unless asked
not to: times / F, bandwidths x F. The table's first line says which units it shows.

A size whose mean time is below its ideal time (``ideal_s``: its bytes at the links' payload rate) moved its bytes
faster than the links can: each HTB port sends up to its burst plus one frame at once after an idle spell, and
this kernel emulates no serialisation delay (no netem), so a latency-bound size's time is short by up to that
many bytes at line rate per iteration. Such rows keep their numbers and say so (``faster_than_links``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from results.tables import numbers

WORD = 4  # bytes of a float, nccl-tests' default type
REDOP = {"allreduce": "sum", "reduce_scatter": "sum"}  # the others print "none"
STAMP_S = 1e-6  # what a float epoch timestamp resolves: a time this close to its ideal is not below it
ROOT = {"broadcast": 0}  # the others print -1
HEADER = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       ",
)


def bandwidth(size_bytes: float, times_s: Sequence[float] | np.ndarray, factor: float) -> tuple[float, float, float]:
    """nccl-tests' figures of one message size from its iterations' times (s): the mean time, algbw = size / that
    mean time (bytes/s) and busbw = algbw x the collective's ``factor`` (NaN when the factor is unknown). The one
    definition behind these tables and the summary's ``algbw_bps``/``busbw_bps``. The median or mean of the
    iterations' own rates is another figure: a slow iteration (a stall) moves it less than it moves the time."""
    mean_s = float(np.mean(times_s))
    algbw = size_bytes / mean_s
    return mean_s, algbw, algbw * factor


def factor_of(rows: pd.DataFrame) -> float:
    """The busbw factor of one job's rows (NaN when they carry none)."""
    factor = numbers(rows, "busbw_factor").dropna()
    return float(factor.iloc[0]) if not factor.empty else float("nan")


def size_tables(iterations: pd.DataFrame, scale: float | None = None) -> dict[str, dict[str, Any]]:
    """Per collective job (rows with a busbw factor): its nccl-tests lines, ``avg_busbw_GBps`` and ``units``.
    ``scale``: the fabric's scale factor, to show real-world units (None or 1: the emulated ones)."""
    out: dict[str, dict[str, Any]] = {}
    if iterations.empty or "busbw_factor" not in iterations:
        return out
    t = iterations[(numbers(iterations, "warmup").fillna(0) == 0) & numbers(iterations, "busbw_factor").notna()]
    f = scale if scale and scale > 1 else 1.0
    for job, rows in t.groupby(t["job"].astype(str), sort=True):
        secs = numbers(rows, "t_end") - numbers(rows, "t_start")
        rows = rows.assign(secs=secs)[secs > 0]
        if rows.empty:
            continue
        kind = str(rows["kind"].iloc[0])
        lines = []
        for size, per in rows.groupby(numbers(rows, "size_bytes"), sort=True):
            mean_s, algbw_Bps, busbw_Bps = bandwidth(float(size), per["secs"].to_numpy(), factor_of(per))
            time_s = mean_s / f
            ideal_s = float(numbers(per, "ideal_s").mean()) / f if "ideal_s" in per else float("nan")
            lines.append(
                {
                    "size": int(size),
                    "count": int(size) // WORD,
                    "type": "float",
                    "redop": REDOP.get(kind, "none"),
                    "root": ROOT.get(kind, -1),
                    "time_us": time_s * 1e6,
                    "algbw_GBps": algbw_Bps * f / 1e9,
                    "busbw_GBps": busbw_Bps * f / 1e9,
                    "wrong": "N/A",
                    "iterations": len(per),
                    "ideal_us": ideal_s * 1e6 if np.isfinite(ideal_s) else None,
                    "faster_than_links": bool(time_s < ideal_s - STAMP_S / f),  # False when the ideal is unknown
                }
            )
        out[str(job)] = {
            "kind": kind,
            "algorithm": str(rows["algorithm"].iloc[0]),
            "ranks": int(numbers(rows, "ranks").iloc[0]),
            "units": f"real-world (fabric.scale {f:g}: times / {f:g}, bandwidths x {f:g})" if f > 1 else "emulated",
            "rows": lines,
            "avg_busbw_GBps": float(np.mean([r["busbw_GBps"] for r in lines])),
        }
    return out


def _time(us: float) -> str:
    """nccl-tests' time column: 2 decimals under 10 ms, 1 under 100 ms, none above."""
    return f"{us:7.2f}" if us < 1e4 else f"{us:7.1f}" if us < 1e5 else f"{us:7.0f}"


def _bw(gbps: float) -> str:
    """nccl-tests prints %6.2f; emulated links run at Mbit/s, so values under 1 GB/s keep 3 significant digits."""
    return f"{gbps:6.2f}" if gbps >= 0.995 or gbps == 0 else f"{gbps:6.3g}"


def format_table(job: str, table: dict[str, Any]) -> str:
    """The job's table as nccl-tests prints it (its out-of-place columns), with a first line naming the job."""
    head = (
        f"# testbed job {job}: {table['kind']} ({table['algorithm']}) over {table['ranks']} ranks; "
        f"units: {table['units']}"
    )
    lines = [head, "#", *HEADER]
    for r in table["rows"]:
        lines.append(
            f"{r['size']:12d}  {r['count']:12d}  {r['type']:>8s}  {r['redop']:>6s}  {r['root']:6d}"
            f"  {_time(r['time_us'])}  {_bw(r['algbw_GBps'])}  {_bw(r['busbw_GBps'])}  {r['wrong']:>5s}"
        )
    lines += ["# Out of bounds values : N/A", f"# Avg bus bandwidth    : {table['avg_busbw_GBps']:g} ", "#"]
    fast = [r for r in table["rows"] if r.get("faster_than_links")]
    if fast:
        sizes = ", ".join(f"{r['size']} ({r['time_us'] / r['ideal_us']:.3f} x ideal)" for r in fast)
        lines.append(
            f"# Faster than the links allow: {sizes}; HTB's burst after idle, no serialisation delay "
            "(README, Known limits)"
        )
    return "\n".join(lines) + "\n"


def report_text(rows: Iterable[Any]) -> str:
    """The tables of every job that swept 2 or more sizes, per comparison row (``results.compare.Row``) and run,
    for ``testbed report``; empty when no run swept."""
    out = []
    for row in rows:
        for run, summary in zip(row.runs, row.summaries, strict=True):
            for job, table in sorted((summary.get("nccl_tests") or {}).items()):
                if len(table["rows"]) >= 2:
                    out.append(f"# {row.variant}: run {run.run_id}\n" + format_table(job, table))
    return "\n".join(out)
