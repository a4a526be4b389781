"""CI: did README's first command (`./setup.sh demo -o DIR`) deliver? Exit 0 only if DIR holds one complete and
faithful run record per point of the default scenario and the HTML report.

    /usr/bin/python3 .ci/check_demo.py DIR [--stdout LOG]

A record another record names in its manifest's ``retake_of`` was superseded by that retake and is not judged.
With ``--stdout`` (the demo's captured output) the report must also be the one its "HTML report: PATH" line names.
Prints one line per run (status, fidelity, cpu_saturation) and one verdict line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def expected_points() -> int | None:
    """How many runs the demo makes: the points of scenarios/default.yaml (None if it cannot be read)."""
    sys.path.insert(0, str(REPO))
    try:
        from testbed.cli import DEFAULT_SCENARIO
        from testbed.spec.scenario import load_scenario_file

        return len(load_scenario_file(DEFAULT_SCENARIO).points)
    except Exception as exc:
        print(f"check_demo: cannot read the default scenario ({type(exc).__name__}: {exc})")
        return None


def cpu_text(manifest: dict[str, Any]) -> str:
    """The cpu_saturation check: share of samples with every core busy, and the mean busy share."""
    for c in (manifest.get("fidelity") or {}).get("checks") or []:
        if c.get("name") == "cpu_saturation":
            mean = (c.get("details") or {}).get("mean_busy")
            return f"{c.get('value')}" + (f" (mean busy {mean:.0%})" if isinstance(mean, (int, float)) else "")
    return "n/a"


def check(out: Path, stdout: Path | None = None) -> list[str]:
    """The problems with the demo's output under ``out`` (empty: it delivered)."""
    problems: list[str] = []
    if not out.is_dir():
        return [f"{out}: no such directory (the demo wrote nothing)"]
    manifests: dict[str, dict[str, Any]] = {}
    for m in sorted(out.glob("*/manifest.json")):
        try:
            manifests[m.parent.name] = json.loads(m.read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"{m}: unreadable manifest ({exc})")
    superseded = {name for man in manifests.values() for name in man.get("retake_of") or []}
    runs = {name: man for name, man in manifests.items() if name not in superseded}
    for name in sorted(superseded & set(manifests)):
        print(f"  retaken  {name} (superseded)")
    for name, man in sorted(runs.items()):
        fid = man.get("fidelity") or {}
        status, faithful = man.get("status"), fid.get("faithful")
        print(
            f"  {status!s:9s} {name}: faithful {faithful}, cpu_saturation {cpu_text(man)}"
            + (f", error {man.get('error')}" if man.get("error") else "")
        )
        if status != "complete":
            problems.append(f"{name}: status {status}" + (f": {man.get('error')}" if man.get("error") else ""))
        elif faithful is None:
            problems.append(f"{name}: no fidelity verdict in its manifest")
        elif faithful is not True:
            problems.append(f"{name}: NOT FAITHFUL: {'; '.join(fid.get('failed') or []) or fid}")
    points = expected_points()
    if not runs:
        problems.append(f"{out}: no run records")
    elif points is not None and len(runs) != points:
        problems.append(f"{out}: {len(runs)} run records, the default scenario has {points} points")
    reports = sorted(out.glob("reports/*/report.html"))
    if stdout is not None:
        named = re.findall(r"^HTML report: (.+)$", stdout.read_text(errors="replace"), re.M)
        if len(named) != 1:
            problems.append(f"{stdout}: {len(named)} 'HTML report: PATH' lines, expected 1")
        else:
            reports = [Path(named[0])]
    if not reports:
        problems.append(f"{out}: no reports/*/report.html")
    for report in reports:
        if not report.is_file() or report.stat().st_size == 0:
            problems.append(f"{report}: missing or empty")
        else:
            print(f"  report   {report}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the demo's -o directory")
    p.add_argument("--stdout", type=Path, default=None, help="the demo's captured standard output")
    args = p.parse_args(argv)
    problems = check(args.out, args.stdout)
    for line in problems:
        print(f"check_demo: FAIL {line}")
    print(f"check_demo: {'FAIL' if problems else 'ok'}: {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
