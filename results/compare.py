"""Compare runs: detect the variant from what differs between the resolved scenarios, group repetitions, and
summarize each variant by mean and 95% confidence interval in a table (terminal, CSV, Markdown).

The variant is never typed by the user: every key of ``manifest["scenario"]`` is flattened to a dotted path
(``links.buffer``, ``traffic[1].dst``), keys that identify a run rather than a setting (seed, repeat, ids,
timestamps) are ignored, and the keys whose values differ between runs name the variant. Runs that did not
complete (failed, incomplete) form their own rows, so they never bend the mean of the complete ones.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from results.metrics import summarize
from results.record import Run
from results.stats import mean_ci

IGNORED_KEY = re.compile(r"(^|\.)(seed|repeat|repeats|repeat_index|run_id|id|prefix|timestamp|date)$|(_at|_id)$")

# (summary key, header, unit) in the order the table shows them; unit picks the display scale. A header says which figure it
# is where two share a name: busbw is nccl-tests' (size over the mean iteration time), the median iteration's is
# labelled so; ECMP balance fabric-wide and in the worst group; retransmissions in all and by kind
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("goodput_bps", "goodput", "Mb/s"),
    ("coll_iter_p50_s", "coll p50", "ms"),
    ("coll_iter_p99_s", "coll p99", "ms"),
    ("busbw_bps", "busbw", "Mb/s"),
    ("busbw_median_iter_bps", "busbw (median iter)", "Mb/s"),
    ("measured_over_ideal", "meas/ideal (median iter)", "x"),
    ("fct_p50_s", "FCT p50", "ms"),
    ("fct_p99_s", "FCT p99", "ms"),
    ("fct_p999_s", "FCT p99.9", "ms"),
    ("rtt_p50_s", "RTT p50", "ms"),
    ("rtt_p99_s", "RTT p99", "ms"),
    ("drops_total", "drops", "n"),
    ("marks_total", "ECN marks", "n"),
    ("queue_backlog_max_bytes", "queue max", "KB"),
    ("queue_backlog_p99_bytes", "queue p99", "KB"),
    ("link_util_mean", "util mean", "%"),
    ("link_util_max", "util max", "%"),
    ("ecmp_imbalance", "ECMP max/mean (fabric)", "x"),
    ("ecmp_imbalance_worst_group", "ECMP max/mean (worst group)", "x"),
    ("retrans_total", "retrans (segs)", "n"),
    ("retrans_fast_total", "fast retrans", "n"),
    ("retrans_rto_total", "RTO retrans", "n"),
    ("retrans_tlp_total", "TLPs", "n"),
    ("retrans_spurious_total", "spurious retrans (D-SACK)", "n"),
    ("retrans_failed_total", "retrans failed at host", "n"),
    ("timeouts_total", "timeouts", "n"),
    ("reorder_total", "reordering", "n"),
    ("jain_fairness", "Jain", "x"),
    ("cpu_mean", "CPU mean", "%"),
    ("cpu_saturated_share", "CPU saturated", "%"),
    ("harness_cpu_share", "harness CPU", "%"),
    ("machine_stalled_share", "machine stalled", "%"),
)
_SCALE = {"Mb/s": 1e-6, "ms": 1e3, "KB": 1e-3, "%": 100.0, "x": 1.0, "n": 1.0, "s": 1.0}


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts/lists -> ``{"a.b": v, "c[0].d": v}``; scalars (and empty containers) are leaves."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(data, list) and data:
        out = {}
        for i, v in enumerate(data):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: data}


def _sort_value(v: Any) -> tuple[int, float, str]:
    """Order '50KB' before '200KB' and 2 before 10: numbers (with unit prefixes) first, then text."""
    if isinstance(v, bool) or v is None:
        return (1, 0.0, str(v))
    if isinstance(v, (int, float)):
        return (0, float(v), "")
    from testbed.spec.units import UnitError, parse_bytes, parse_duration, parse_rate

    for parse in (parse_bytes, parse_rate, parse_duration):
        try:
            return (0, float(parse(v)), str(v))
        except (UnitError, ValueError, TypeError):
            continue
    return (1, 0.0, str(v))


def _short_names(keys: Sequence[str]) -> dict[str, str]:
    """The shortest dotted suffix of each key that no other key ends with."""
    out = {}
    for k in keys:
        parts = k.split(".")
        for n in range(1, len(parts) + 1):
            cand = ".".join(parts[-n:])
            if not any(o != k and (o == cand or o.endswith("." + cand)) for o in keys):
                out[k] = cand
                break
        else:
            out[k] = k
    return out


@dataclass
class Variants:
    keys: list[str]  # dotted scenario keys that differ between the runs
    values: dict[str, dict[str, Any]]  # run_id -> {key: value}
    labels: dict[str, str]  # run_id -> "buffer=50KB"


UNSET = "<unset>"
# the scenario's own name for a setting (testbed.spec.scenario): a label names it by its value alone, so that an
# A/A sweep's rows read "A" and "B"
LABEL_KEY = "label"


def detect_variants(runs: Sequence[Run]) -> Variants:
    flat = {
        r.run_id: {k: v for k, v in flatten(r.manifest.get("scenario") or {}).items() if not IGNORED_KEY.search(k)}
        for r in runs
    }
    all_keys = sorted({k for f in flat.values() for k in f})
    differing = [
        k
        for k in all_keys
        if len({json.dumps(f.get(k, UNSET), sort_keys=True, default=str) for f in flat.values()}) > 1
    ]
    values = {rid: {k: f.get(k, UNSET) for k in differing} for rid, f in flat.items()}
    shown = label_keys(differing, values)
    short = _short_names(shown)
    labels = {}
    for r in runs:
        vals = values[r.run_id]
        parts = [
            str(vals[k]) if k == LABEL_KEY else f"{short[k]}={vals[k]}" for k in shown if vals[k] not in (None, UNSET)
        ]
        labels[r.run_id] = ", ".join(parts) if parts else str(r.manifest.get("scenario_name") or "all runs")
    return Variants(differing, values, labels)


def label_keys(differing: Sequence[str], values: dict[str, dict[str, Any]]) -> list[str]:
    """The differing keys worth naming in a label: a key whose values move in lockstep with an earlier key's
    (fabric_link.marking.k beside host_link.marking.k, when a sweep sets both) is left out of labels."""
    shown: list[str] = []
    seen: set[tuple[str, str]] = set()
    for k in differing:
        pattern = json.dumps([values[rid][k] for rid in sorted(values)], sort_keys=True, default=str)
        suffix = k.split(".")[-1]
        if (suffix, pattern) in seen:
            continue
        seen.add((suffix, pattern))
        shown.append(k)
    return shown


def fidelity_ok(manifest: dict[str, Any]) -> bool | None:
    """True/False from manifest["fidelity"] ({"faithful": bool} or {"status": "ok"|...}); None when absent."""
    fid = manifest.get("fidelity")
    if not isinstance(fid, dict):
        return None
    if isinstance(fid.get("faithful"), bool):
        return bool(fid["faithful"])
    if isinstance(fid.get("status"), str):
        return fid["status"].lower() in ("ok", "faithful", "pass", "passed")
    return None


@dataclass
class Cell:
    mean: float | None
    ci95: float | None = None
    n: int = 0
    reason: str | None = None


@dataclass
class Row:
    variant: str
    status: str
    fidelity: str
    runs: list[Run]
    summaries: list[dict[str, Any]]
    cells: dict[str, Cell] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The style key: the variant, plus the status when the runs did not complete."""
        return self.variant if self.status.startswith("complete") else f"{self.variant} [{self.status.split(':')[0]}]"


@dataclass
class Comparison:
    variants: Variants
    rows: list[Row]
    columns: list[tuple[str, str, str]]

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.rows]


def _number(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _class_p99_why(cls: str, entry: dict[str, Any]) -> str:
    """Why a traffic class's FCT p99 cell is empty: the summary's own reason (too few flows for a p99), or none
    finished in the class."""
    why = (entry.get("not_applicable") or {}).get("p99_s")
    if why:
        return f"class {cls}: {why}"
    return f"no finished flow in class {cls}" if not entry.get("n") else f"class {cls}: p99 not in this record"


def _cell(key: str, summaries: list[dict[str, Any]]) -> Cell:
    """The mean over the runs that computed ``key``; n/a with the runs' reasons (a refused quantile's among them:
    "p99 needs >= 100 samples, have 8") when none did, the count and reasons of those that did not otherwise."""
    vals = [s.get(key) for s in summaries]
    nums = [float(v) for v in vals if _number(v)]
    reasons = "; ".join(
        sorted(
            {
                str(s.get("not_applicable", {}).get(key, f"{key} missing from the summary"))
                for s, v in zip(summaries, vals, strict=True)
                if not _number(v)
            }
        )
    )
    if not nums:
        return Cell(None, reason=reasons)
    mean, half, n = mean_ci(nums)
    reason = f"{len(vals) - n} of {len(vals)} runs could not compute it: {reasons}" if n < len(vals) else None
    return Cell(mean, half, n, reason)


def _status(runs: list[Run]) -> str:
    st = runs[0].status
    if st == "failed":
        errors = sorted({str(r.manifest.get("error") or "no error recorded") for r in runs})
        return f"failed: {'; '.join(errors)}"
    return st


def _fidelity(runs: list[Run]) -> str:
    oks = [fidelity_ok(r.manifest) for r in runs]
    if all(o is None for o in oks):
        return "unknown (no fidelity record)"
    bad = sum(1 for o in oks if o is False)
    if bad == 0 and None not in oks:
        warned = sum(1 for r in runs if (r.manifest.get("fidelity") or {}).get("warnings"))
        return f"ok ({warned}/{len(runs)} with a warning)" if warned else "ok"
    return f"NOT FAITHFUL ({bad}/{len(runs)})" if bad else "partly unknown"


def compare(runs: Sequence[Run], summaries: dict[str, dict[str, Any]] | None = None) -> Comparison:
    """One row per (variant, status); summaries default to ``summarize(run)`` computed afresh."""
    if not runs:
        raise ValueError("no runs to compare")
    summaries = dict(summaries or {})
    for r in runs:
        if r.run_id not in summaries:
            summaries[r.run_id] = summarize(r)
            r.forget()  # streamed: one run's raw tables in memory at a time
    variants = detect_variants(runs)
    groups: dict[tuple[str, str], list[Run]] = {}
    for r in sorted(runs, key=lambda r: int(r.manifest.get("repeat_index") or 0)):
        groups.setdefault((variants.labels[r.run_id], r.status), []).append(r)
    order = {rid: tuple(_sort_value(v) for v in vals.values()) for rid, vals in variants.values.items()}
    keys = sorted(groups, key=lambda g: (order[groups[g][0].run_id], g[1] != "complete", g[1]))
    jobs = sorted({j for s in summaries.values() for j in (s.get("goodput_per_job_bps") or {})})
    columns = list(COLUMNS[:1]) + [(f"goodput[{j}]", f"goodput {j}", "Mb/s") for j in jobs] + list(COLUMNS[1:])
    if any(s.get("exposed_comm_s") is not None for s in summaries.values()):  # a trace or DDP step was replayed
        at = next(i for i, c in enumerate(columns) if c[0] == "measured_over_ideal") + 1
        columns[at:at] = [("exposed_comm_s", "exposed comm", "ms"), ("exposed_comm_share", "exposed share", "%")]
    tclasses = sorted({c for s in summaries.values() for c in (s.get("fct_by_traffic_class") or {})})
    if tclasses:  # traffic classes: each one's FCT tail beside the run's
        at = next(i for i, c in enumerate(columns) if c[0] == "fct_p999_s") + 1
        columns[at:at] = [(f"fct_p99[{c}]", f"FCT p99 {c}", "ms") for c in tclasses]
    if any(s.get("pauses_total") is not None for s in summaries.values()):  # lossless classes: PFC's pauses
        at = next(i for i, c in enumerate(columns) if c[0] == "marks_total") + 1
        columns[at:at] = [("pauses_total", "pauses", "n"), ("pause_s_total", "pause time", "s")]
    rows = []
    for key in keys:
        rs = groups[key]
        sums = [dict(summaries[r.run_id]) for r in rs]
        for s in sums:  # per-class FCT as flat keys
            for c in tclasses:
                entry = (s.get("fct_by_traffic_class") or {}).get(c) or {}
                s[f"fct_p99[{c}]"] = entry.get("p99_s")
                s.setdefault("not_applicable", {})[f"fct_p99[{c}]"] = _class_p99_why(c, entry)
        for s in sums:  # per-job goodput as flat keys
            for j in jobs:
                per = s.get("goodput_per_job_bps") or {}
                s[f"goodput[{j}]"] = per.get(j)
                s.setdefault("not_applicable", {})[f"goodput[{j}]"] = (
                    s.get("not_applicable", {}).get("goodput_per_job_bps") or f"job {j} has no flows in this run"
                )
        row = Row(key[0], _status(rs), _fidelity(rs), rs, sums)
        row.cells = {c[0]: _cell(c[0], sums) for c in columns}
        rows.append(row)
    return Comparison(variants, rows, columns)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    v = value * _SCALE[unit]
    if unit == "n":
        return f"{v:.0f}" if abs(v - round(v)) < 1e-9 or abs(v) >= 100 else f"{v:.1f}"
    if unit == "x":
        return f"{v:.3f}"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def cell_text(cell: Cell, unit: str) -> str:
    if cell.mean is None:
        return "n/a"
    text = fmt(cell.mean, unit)
    return text + (f" ±{fmt(cell.ci95, unit)}" if cell.ci95 is not None else "")


def _header(col: tuple[str, str, str]) -> str:
    return f"{col[1]} ({col[2]})" if col[2] not in ("n", "x") else col[1]


def table_cells(cmp: Comparison) -> tuple[list[str], list[list[str]], list[str]]:
    """Headers, rows of text cells (n/a cells carry a footnote number) and the footnotes."""
    headers = ["variant", "status", "runs", "fidelity"] + [_header(c) for c in cmp.columns]
    notes: list[str] = []
    body = []
    for row in cmp.rows:
        line = [row.variant, row.status, str(len(row.runs)), row.fidelity]
        for key, _, unit in cmp.columns:
            cell = row.cells[key]
            text = cell_text(cell, unit)
            if cell.reason:
                note = f"{row.label} / {key}: {cell.reason}"
                if note not in notes:
                    notes.append(note)
                text += f" [{notes.index(note) + 1}]"
            line.append(text)
        body.append(line)
    return headers, body, notes


def write_csv(cmp: Comparison, path: Path) -> None:
    """Numbers in SI units as stored in summaries (bit/s, s, bytes, fractions); ``<metric>_ci95`` half-widths."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["variant", "status", "runs", "fidelity", "run_ids"]
            + [x for c in cmp.columns for x in (c[0], f"{c[0]}_ci95")]
            + ["not_applicable"]
        )
        for row in cmp.rows:
            na = "; ".join(f"{k}: {row.cells[k].reason}" for k, _, _ in cmp.columns if row.cells[k].reason)
            cells = []
            for key, _, _ in cmp.columns:
                c = row.cells[key]
                cells += ["n/a" if c.mean is None else repr(c.mean), "" if c.ci95 is None else repr(c.ci95)]
            ids = " ".join(r.run_id for r in row.runs)
            w.writerow([row.variant, row.status, len(row.runs), row.fidelity, ids, *cells, na])


def to_markdown(cmp: Comparison) -> str:
    headers, body, notes = table_cells(cmp)
    esc = [[c.replace("|", "\\|") for c in line] for line in [headers, *body]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(line) + " |" for line in esc[1:]]
    lines.append("")
    lines.append(
        "Variant detected from the scenarios: "
        + (", ".join(f"`{k}`" for k in cmp.variants.keys) or "none (all runs share one scenario)")
        + "."
    )
    lines.append("Values are means over repetitions, ± the half-width of the 95% confidence interval (Student t).")
    if notes:
        lines.append("")
        lines += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines) + "\n"


def to_text(cmp: Comparison, width: int | None = None) -> str:
    """Aligned plain text, one row per variant; columns wrap into blocks that fit ``width`` (terminal width)."""
    width = width or shutil.get_terminal_size((160, 24)).columns
    headers, body, notes = table_cells(cmp)
    widths = [max(len(headers[i]), *(len(r[i]) for r in body)) for i in range(len(headers))]
    fixed = [0]  # the variant column repeats in every block
    blocks: list[list[int]] = []
    cur: list[int] = []
    for i in range(1, len(headers)):
        used = sum(widths[j] + 2 for j in fixed + cur)
        if cur and used + widths[i] + 2 > width:
            blocks.append(cur)
            cur = []
        cur.append(i)
    blocks.append(cur)
    out = []
    for block in blocks:
        idx = fixed + block
        out.append("  ".join(headers[i].ljust(widths[i]) for i in idx).rstrip())
        out.append("  ".join("-" * widths[i] for i in idx))
        out += ["  ".join(r[i].ljust(widths[i]) for i in idx).rstrip() for r in body]
        out.append("")
    out.append("variant keys: " + (", ".join(cmp.variants.keys) or "none"))
    out += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(out) + "\n"


def load_all(paths: Iterable[Path]) -> list[Run]:
    from results.record import find_runs

    return find_runs(paths)
