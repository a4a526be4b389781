"""A sweep's records as one tidy table: one row per run, a column per swept key, the repeat, and each run's summary.

A sweep writes one record per point and repetition, each manifest naming its ``variant`` (swept key -> value) and
``repeat_index``. ``load_sweep`` reads every record at or below the given paths (``results.record.find_runs``),
labels each with ``results.compare.detect_variants`` (the labels ``testbed report`` shows), and flattens each
summary's scalar metrics into columns, so that pandas' own ``groupby`` answers "how did this metric move with that
key". ``sweep_table`` is that grouping with the report's statistic: the mean and its 95% interval over the repeats.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from results.compare import _sort_value, detect_variants, fidelity_ok
from results.metrics import summarize
from results.record import Run, find_runs
from results.stats import mean_ci

# The columns every row has, before the swept keys and the metrics.
ID_COLUMNS = ("run_id", "path", "scenario", "status", "faithful", "variant", "repeat", "seed", "placement_seed")
# summary entries that describe the summary rather than measure the run
_NOT_METRICS = frozenset({"schema", "run_id", "status"})


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _cell(value: Any) -> Any:
    """A swept value as a table cell: scalars as they are, a mapping or list as its JSON text (hashable, so that
    ``groupby`` can group by it)."""
    return value if _scalar(value) else json.dumps(value, sort_keys=True, default=str)


def swept_keys(runs: Sequence[Run]) -> list[str]:
    """The keys the runs' sweeps set (manifest ``variant``), in the order first seen; when no run names one (runs
    of separate invocations), the scenario keys whose values differ between the runs."""
    keys: dict[str, None] = {}
    for r in runs:
        for k in r.manifest.get("variant") or {}:
            keys.setdefault(str(k), None)
    return list(keys) if keys else detect_variants(runs).keys


def _placement_seed(manifest: dict[str, Any]) -> int | None:
    placement = manifest.get("placement")
    seed = placement.get("seed") if isinstance(placement, dict) else None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _summary(run: Run, recompute: bool) -> dict[str, Any]:
    """The run's summary: as recorded (summary.json), or computed afresh with today's definitions."""
    if recompute:
        summary = summarize(run)
        run.forget()  # one run's tables in memory at a time
        return summary
    return run.summary or {}


def load_sweep(paths: str | Path | Iterable[str | Path], recompute: bool = False) -> pd.DataFrame:
    """Every run record at or below ``paths`` (a sweep's output directory, run directories, or several) as one
    DataFrame, one row per run.

    Columns: ``ID_COLUMNS`` (``variant`` is the report's label, e.g. ``buffer=50KB``; ``repeat`` the repetition
    index; ``faithful`` the fidelity verdict, None when unrecorded; ``placement_seed`` None when unrecorded), then
    one column per swept key under its dotted name (``fabric.host_link.buffer``; a mapping value as JSON text), then
    every scalar metric of the summary (``goodput_bps``, ``fct_p99_s``, ...). A run without a summary (failed,
    incomplete) keeps its row with its metrics missing; a metric another run's summary lacks (an older summary) is
    missing too. ``recompute`` computes each summary afresh instead of reading summary.json. Rows are ordered by
    the swept values (``50KB`` before ``200KB``), then the repeat; ``frame.attrs["swept_keys"]`` lists the swept keys."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    runs = find_runs(Path(p) for p in paths)
    keys = swept_keys(runs)
    labels = detect_variants(runs)
    rows = []
    for r in runs:
        m = r.manifest
        variant = m.get("variant") or labels.values.get(r.run_id, {})
        row: dict[str, Any] = {
            "run_id": r.run_id,
            "path": str(r.path),
            "scenario": m.get("scenario_name"),
            "status": r.status,
            "faithful": fidelity_ok(m),
            "variant": labels.labels[r.run_id],
            "repeat": int(m.get("repeat_index") or 0),
            "seed": m.get("seed"),
            "placement_seed": _placement_seed(m),
        }
        row.update({k: _cell(variant.get(k)) for k in keys})
        summary = _summary(r, recompute)
        row.update({k: v for k, v in summary.items() if k not in _NOT_METRICS and k not in row and _scalar(v)})
        rows.append(row)
    order = sorted(range(len(rows)), key=lambda i: ([_sort_value(rows[i][k]) for k in keys], rows[i]["repeat"], i))
    frame = pd.DataFrame([rows[i] for i in order])
    frame.attrs["swept_keys"] = keys
    return frame


def sweep_table(frame: pd.DataFrame, by: str | Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """Each metric's mean, the half-width of its 95% confidence interval and its count of runs, per value of the
    swept key(s) ``by`` (the statistic ``testbed report`` shows), in the order of ``frame``'s rows. Columns are
    ``<metric>``, ``<metric>_ci95`` and ``<metric>_n``; a group in which no run computed a metric has a missing mean
    and n 0; one run gives no interval (NaN). Runs that did not complete are left out, as the report keeps them out of the complete runs' mean."""
    by = [by] if isinstance(by, str) else list(by)
    missing = [c for c in [*by, *metrics] if c not in frame.columns]
    if missing:
        raise KeyError(f"no column {', '.join(map(repr, missing))} in the sweep (columns: {', '.join(frame.columns)})")
    done = frame[frame["status"] == "complete"]
    out = []
    for value, group in done.groupby(by[0] if len(by) == 1 else by, sort=False, dropna=False):
        row = dict(zip(by, value if len(by) > 1 else (value,), strict=True))
        for m in metrics:
            numbers = pd.to_numeric(group[m], errors="coerce").dropna()
            mean, half, n = mean_ci(numbers) if len(numbers) else (math.nan, None, 0)
            row.update({m: mean, f"{m}_ci95": math.nan if half is None else half, f"{m}_n": n})
        out.append(row)
    return pd.DataFrame(out, columns=[*by, *(c for m in metrics for c in (m, f"{m}_ci95", f"{m}_n"))])
