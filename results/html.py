"""One self-contained HTML report: inline CSS, PNG figures embedded as base64, no external reference at all, so
it opens offline. It holds the automatic reading of the differences, the comparison table, the figures, the
scenario and the environment (kernel, capabilities, tools, git revision) of the runs.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import yaml

from results import nccl_tests
from results import versus as vs
from results.claims import NO_WINNER
from results.compare import Comparison, fmt, table_cells
from results.machines import calibration_caveat
from results.plots import Plots
from results.versus import Versus, baseline, versus

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1500px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;
text-align:right;white-space:nowrap}th{background:#f1f1f1}td:first-child,td:nth-child(2),td:nth-child(4)
{text-align:left}.scroll{overflow-x:auto}.bad{background:#fde2e2}.na{color:#999}
.sticky{border-collapse:separate;border-spacing:0}.sticky td,.sticky th{border-width:0 1px 1px 0}
.sticky tr:first-child th{border-top-width:1px}.sticky td:first-child,.sticky th:first-child{border-left-width:1px;
position:sticky;left:0;z-index:1;background:#fff}.sticky th:first-child{background:#f1f1f1}
.sticky tr.bad td:first-child{background:#fde2e2}.better{background:#e3f4e3}.worse{background:#fdf0d5}
.versus td:last-child{text-align:left}
figure{display:inline-block;margin:8px;vertical-align:top}figure img{max-width:560px;border:1px solid #ddd}
pre{background:#f7f7f7;padding:8px;font-size:12px;overflow-x:auto;max-height:420px}
.reading{background:#eef5ff;padding:10px 14px;border-left:4px solid #1f77b4}.notes{font-size:12px;color:#555}
"""


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _verdicts(items: list[Versus]) -> list[str]:
    """Per variant, the metrics on which it was named better or worse than the baseline."""
    out = []
    for variant in dict.fromkeys(v.claim.a for v in items):
        mine = [v for v in items if v.claim.a == variant]
        if all(v.claim.verdict == NO_WINNER for v in mine):
            continue  # its one-run sentence says so
        better = [v.what for v in mine if v.better is True]
        worse = [v.what for v in mine if v.better is False]
        base = mine[0].claim.b
        if better or worse:
            said = f"better than {base} on {_and(better)}" if better else f"worse than {base} on {_and(worse)}"
            if better and worse:
                said += f", and worse on {_and(worse)}"
            out.append(f"Where a winner is named, {variant} is {said}.")
        else:
            out.append(f"No winner named between {variant} and {base}.")
    return out


def reading(cmp: Comparison, notes: Sequence[str] = ()) -> str:
    """One paragraph of plain text: each variant against the baseline on the headline metrics (results.versus: a
    direction is claimed only where a 95% interval excludes 0, never from one run per variant), drops and marks per
    variant, rows that did not complete, caveats.

    ``notes``: sentences that qualify the claims, placed right after them (e.g. whether the compared variants shared
    their flow placement in each repeat).
    """
    done = [r for r in cmp.rows if r.status == "complete"]
    keys = ", ".join(cmp.variants.keys) or "nothing (one scenario)"
    parts = [
        f"{len(cmp.rows)} row(s) from {sum(len(r.runs) for r in cmp.rows)} run(s); the scenarios differ in {keys}."
    ]
    base = baseline(cmp)
    items = versus(cmp)
    if base is not None and items:
        parts.append(f"Against the baseline {base.variant} (differences: variant - baseline):")
        parts += vs.sentences(items)
        parts += _verdicts(items)
    parts += [n.strip() for n in notes if n and n.strip()]
    drops = [
        f"{r.variant}: {fmt(r.cells['drops_total'].mean, 'n')}" for r in done if r.cells["drops_total"].mean is not None
    ]
    if drops:
        parts.append("Drops (mean per run): " + "; ".join(drops) + ".")
    marks = [f"{r.variant}: {fmt(r.cells['marks_total'].mean, 'n')}" for r in done if r.cells["marks_total"].mean]
    if marks:
        parts.append("ECN marks: " + "; ".join(marks) + ".")
    odd = [f"{r.variant} ({r.status}, {len(r.runs)} run(s))" for r in cmp.rows if r.status != "complete"]
    if odd:
        parts.append("Not complete, shown apart and left out of this reading: " + "; ".join(odd) + ".")
    unfaithful = [r.variant for r in cmp.rows if r.fidelity.startswith("NOT")]
    if unfaithful:
        parts.append("Fidelity guardrails failed for: " + ", ".join(unfaithful) + " (treat those numbers with care).")
    caveat = calibration_caveat(r.manifest for row in cmp.rows for r in row.runs)
    if caveat:
        parts.append(caveat)
    if not done:
        parts.append("No run completed, so no variant is compared.")
    return " ".join(parts)


def _table(cmp: Comparison) -> str:
    """The comparison table (its first column stays in view while the ~30 columns scroll) and, with two or more
    complete rows, the table of each variant against the baseline."""
    headers, body, notes = table_cells(cmp)
    out = [
        "<div class='scroll'><table class='sticky'><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        + "</tr>"
    ]  # fmt: skip
    for row, line in zip(cmp.rows, body, strict=True):
        cls = "" if row.status == "complete" and not row.fidelity.startswith("NOT") else " class='bad'"
        cells = "".join(
            f"<td class='na'>{html.escape(c)}</td>" if c.startswith("n/a") else f"<td>{html.escape(c)}</td>"
            for c in line
        )
        out.append(f"<tr{cls}>{cells}</tr>")
    out.append("</table></div>")
    out.append(
        "<p class='notes'>Means over repetitions ± half-width of the 95% confidence interval (Student t); runs: "
        "the repetitions in each row. Units in the headers.</p>"
    )
    if notes:
        out.append("<ol class='notes'>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ol>")
    out += _versus_table(cmp)
    return "\n".join(out)


def _versus_table(cmp: Comparison) -> list[str]:
    items = versus(cmp)
    if not items:
        return []
    out = [f"<h3>{html.escape(vs.title(cmp))}</h3><div class='scroll'><table class='sticky versus'><tr>"]
    out[0] += "".join(f"<th>{html.escape(h)}</th>" for h in vs.HEADERS) + "</tr>"
    for v, line in zip(items, vs.cells(items), strict=True):
        cls = "" if v.better is None else " class='better'" if v.better else " class='worse'"
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in line) + "</tr>")
    out.append("</table></div>")
    out.append(f"<p class='notes'>{html.escape(vs.NOTE)}</p>")
    return out


def _figures(plots: Plots) -> str:
    out = []
    for name, paths in plots.files.items():
        png = next(p for p in paths if p.suffix == ".png")
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        title = html.escape(plots.titles.get(name, name))
        out.append(
            f"<figure><img alt='{title}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{title} ({html.escape(png.name)}, SVG beside it)</figcaption></figure>"
        )
    if plots.skipped:
        out.append(
            "<p class='notes'>Figures not drawn:</p><ul class='notes'>"
            + "".join(
                f"<li>{html.escape(plots.titles.get(n, n))}: {html.escape(r)}</li>" for n, r in plots.skipped.items()
            )
            + "</ul>"
        )
    return "\n".join(out)


def _pre(data: Any) -> str:
    try:
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    except yaml.YAMLError:
        text = json.dumps(data, indent=2, default=str)
    return f"<pre>{html.escape(text)}</pre>"


ENV_KEYS = ("git_revision", "kernel", "hostname", "cpus", "capabilities", "tools", "sysctls", "marking", "fidelity")


def _environment(cmp: Comparison) -> str:
    runs = [r for row in cmp.rows for r in row.runs]
    first = runs[0].manifest
    out = [_pre({k: first.get(k) for k in ENV_KEYS if first.get(k) is not None})]
    for key in ("git_revision", "kernel", "hostname", "tools"):
        seen = {json.dumps(r.manifest.get(key), sort_keys=True, default=str) for r in runs}
        if len(seen) > 1:
            out.append(f"<p class='bad'>The runs differ in <b>{key}</b>: {html.escape(', '.join(sorted(seen)))}</p>")
    return "\n".join(out)


def _runs(cmp: Comparison) -> str:
    out = ["<table><tr><th>run</th><th>variant</th><th>repeat</th><th>status</th><th>started</th><th>path</th></tr>"]
    for row in cmp.rows:
        for r in row.runs:
            m = r.manifest
            out.append(
                "<tr>"
                + "".join(
                    f"<td>{html.escape(str(x))}</td>"
                    for x in (r.run_id, row.variant, m.get("repeat_index"), r.status, m.get("started_at"), r.path)
                )
                + "</tr>"
            )
    return "\n".join(out) + "</table>"


def _slowest(cmp: Comparison) -> list[str]:
    """Each run's slowest replayed collective and the queue it waited behind most (results.metrics.trace)."""
    rows = [(row.variant, r.run_id, s["slowest_collective"]) for row in cmp.rows
            for r, s in zip(row.runs, row.summaries, strict=True) if s.get("slowest_collective")]  # fmt: skip
    if not rows:
        return []
    head = ["variant", "run", "job", "node", "iteration", "time (ms)", "queue it waited behind most", "its max (KB)"]
    out = ["<h2>Slowest collective</h2><table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for variant, run_id, c in rows:
        peak = c.get("queue_backlog_max_bytes")
        cells = (variant, run_id, c["job"], f"{c['node_id']} {c['name']}", c["iter"], f"{c['seconds'] * 1e3:.1f}",
                 c.get("queue", "no queue data"), "" if peak is None else f"{peak / 1e3:.1f}")  # fmt: skip
        out.append("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in cells) + "</tr>")
    return ["\n".join(out) + "</table>"]


def _sweeps(cmp: Comparison) -> list[str]:
    """The size sweeps in nccl-tests' layout (results.nccl_tests), to read beside a cluster's nccl-tests output."""
    text = nccl_tests.report_text(cmp.rows)
    if not text:
        return []
    return ["<h2>Size sweeps (nccl-tests layout)</h2>", f"<pre>{html.escape(text)}</pre>"]


def render(cmp: Comparison, plots: Plots, title: str | None = None, notes: Sequence[str] = ()) -> str:
    """The page; ``notes`` qualify the reading's claims (``reading``)."""
    names = sorted({str(r.manifest.get("scenario_name")) for row in cmp.rows for r in row.runs})
    title = title or f"Testbed report: {', '.join(names)}"
    base = next((r for row in cmp.rows for r in row.runs if r.status == "complete"), cmp.rows[0].runs[0])
    variants = {row.variant: cmp.variants.values[row.runs[0].run_id] for row in cmp.rows}
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return "\n".join(
        [
            "<!DOCTYPE html>",
            "<html lang='en'><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title>",
            f"<style>{CSS}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            f"<p class='notes'>Generated {now} by results.html from the run records listed at the end.</p>",
            f"<h2>Reading</h2><p class='reading'>{html.escape(reading(cmp, notes))}</p>",
            "<h2>Comparison</h2>",
            _table(cmp),
            "<h2>Figures</h2>",
            _figures(plots),
            *_sweeps(cmp),
            *_slowest(cmp),
            "<h2>Scenario</h2>",
            "<p>Variant keys and their values per row:</p>",
            _pre(variants),
            f"<p>Resolved scenario of {html.escape(base.run_id)}:</p>",
            _pre(base.manifest.get("scenario")),
            "<h2>Environment</h2>",
            _environment(cmp),
            "<h2>Runs</h2>",
            _runs(cmp),
            "</body></html>",
        ]
    )
