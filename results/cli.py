"""``testbed report RUN_DIR... [-o OUT_DIR]``: compare run records, write table, figures and HTML.

``testbed report --pending DIR``: write every report that was deferred under DIR (``defer_report``: the
software-emulated guest leaves its scenario reports to the host, where one takes a fraction of the guest's time:
docs/bench.md).

Never writes into the run records. Under sudo in a user's directory the report is handed to that user
(``results.handover``). A complete record's metrics are its own summary.json (what its run computed);
a record without one (an incomplete or failed run) is summarized afresh from its tables, and reported like any
other, labelled as such. ``--recompute`` summarizes every record afresh (after a metric's definition changed).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from results import nccl_tests, placement, versus
from results.compare import Comparison, compare, to_markdown, to_text, write_csv
from results.handover import plan
from results.html import reading, render
from results.metrics import SUMMARY_SCHEMA
from results.plots import make_plots
from results.record import NCCL_TESTS, RecordError, Run, find_runs


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="testbed report", description="Compare run records (run directories or parents of sweeps)."
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="a run directory or a directory above runs")
    p.add_argument("-o", "--out", type=Path, default=None, help="output directory (default: ./reports/<UTC timestamp>)")
    p.add_argument("--no-plots", action="store_true", help="only the table (CSV, Markdown, terminal)")
    p.add_argument("--recompute", action="store_true", help="summarize every record afresh, ignoring summary.json")
    p.add_argument("-v", "--verbose", action="store_true", help="log skipped figures and progress")
    return p


PENDING = "pending.json"


def defer_report(runs: list[Path], out: Path) -> Path:
    """Record that ``out`` should hold the report of ``runs``, for ``report --pending`` to write later."""
    handover = plan(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / PENDING
    path.write_text(json.dumps({"runs": [str(r) for r in runs]}, indent=1) + "\n")
    if handover is not None:
        handover.give(out)
    return path


def pending_main(root: Path) -> int:
    """Write every deferred report under ``root``; 0 when all were written (or none was pending)."""
    rc = 0
    for p in sorted(Path(root).rglob(PENDING)):
        runs = json.loads(p.read_text())["runs"]
        got = report_main([*runs, "-o", str(p.parent)])
        if got == 0:
            p.unlink()
        rc = rc or got
    return rc


def recorded_summaries(runs: list[Run]) -> dict[str, dict[str, Any]]:
    """The summary.json of each complete record written by this summary schema (the others are summarized afresh)."""
    out = {}
    for r in runs:
        s = r.summary if r.status == "complete" else None
        if s is not None and s.get("schema") == SUMMARY_SCHEMA:
            out[r.run_id] = s
    return out


def reading_notes(cmp: Comparison) -> list[str]:
    """Sentences that qualify the reading's claims, for ``reading`` and ``render``: whether the compared variants
    shared their flow placement in each repeat (results.placement)."""
    text = placement.note(cmp.rows)
    return [text] if text else []


def report_main(argv: list[str]) -> int:
    if argv[:1] == ["--pending"]:
        if len(argv) != 2:
            print("usage: testbed report --pending DIR", file=sys.stderr)
            return 2
        return pending_main(Path(argv[1]))
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        runs = find_runs(args.runs)
    except RecordError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    out = args.out or Path("reports") / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    handover = plan(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        _write_report(args, runs, out)
    finally:
        if handover is not None:
            handover.give(out)
    return 0


def _write_report(args: argparse.Namespace, runs: list[Run], out: Path) -> None:
    """The comparison's table, figures and HTML in ``out``, each named on the terminal."""
    cmp = compare(runs, None if args.recompute else recorded_summaries(runs))
    print(to_text(cmp))
    against = versus.to_text(cmp)
    if against:
        print(against)
    write_csv(cmp, out / "comparison.csv")
    md = to_markdown(cmp)
    against_md = versus.to_markdown(cmp)
    (out / "comparison.md").write_text(md + ("\n" + against_md if against_md else ""), encoding="utf-8")
    written = [out / "comparison.csv", out / "comparison.md"]
    if versus.write_csv(cmp, out / "versus.csv"):
        written.append(out / "versus.csv")
    notes = reading_notes(cmp)
    sweeps = nccl_tests.report_text(cmp.rows)
    if sweeps:
        print(sweeps)
        (out / NCCL_TESTS).write_text(sweeps, encoding="utf-8")
        written.append(out / NCCL_TESTS)
    if not args.no_plots:
        plots = make_plots(cmp, out / "plots")
        for name, reason in plots.skipped.items():
            print(f"figure {name} not drawn: {reason}")
        (out / "report.html").write_text(render(cmp, plots, notes=notes), encoding="utf-8")
        written += [out / "report.html", out / "plots"]
    print(reading(cmp, notes))
    print(f"{len(runs)} run(s), {len(cmp.rows)} row(s); wrote " + ", ".join(str(p) for p in written))


if __name__ == "__main__":
    raise SystemExit(report_main(sys.argv[1:]))
