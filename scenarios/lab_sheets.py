"""A lab sheet (docs/labs/*.md) as the steps a test executes: its run command, its CLI session, its one change and
what the instructor should expect (pure: parsing, the edit, the checks; scenarios/test_teaching_labs.py runs them).

A sheet marks them in fenced blocks:
- a plain block whose line is ``python3 -m testbed run scenarios/X.yaml -o runs/labN``: the run;
- ``lab-cli``: ``python3 -m testbed cli scenarios/X.yaml`` then ``mininet> COMMAND`` lines;
- ``yaml lab-change``: the one setting, ``dotted.path: value`` (list items by index), applied to a copy;
- ``yaml lab-expect``: checks on the run's summaries, each ``{metric, point, ...}`` with one of
  ``about`` + ``within: [lo, hi]`` (lo x about <= value <= hi x about), ``at_most``, ``at_least`` or ``matches``;
  ``point`` is the sweep point's index, ``over`` another point's index to take the ratio against; ``metric`` is a
  dotted path into the point's summary.json;
- ``yaml lab-check`` (break-fix labs): checks of the same form that the fixed run (the change applied) must pass
  and the broken run must not. A student runs them on a record directory:
  ``python3 -m scenarios.lab_sheets check docs/labs/SHEET.md runs/DIR``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class LabSheet:
    path: Path
    scenario: str  # the scenario file the sheet runs, relative to the repository
    run_argv: tuple[str, ...]
    cli: tuple[str, ...] = ()  # the mininet> commands
    change: dict[str, Any] = field(default_factory=dict)
    expect: tuple[dict[str, Any], ...] = ()
    fixed: tuple[dict[str, Any], ...] = ()  # lab-check: what the fix must show


def parse(path: Path) -> LabSheet:
    """The sheet's steps; ValueError names what is missing."""
    blocks = [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(path.read_text())]
    runs = [ln.strip() for info, body in blocks if not info for ln in body.splitlines() if " testbed run " in ln]
    if len(runs) != 1:
        raise ValueError(f"{path.name}: expected one `python3 -m testbed run` line, found {len(runs)}")
    argv = tuple(runs[0].split())
    scenario = argv[argv.index("run") + 1]
    cli = tuple(
        ln.removeprefix("mininet>").strip()
        for info, body in blocks
        if info == "lab-cli"
        for ln in body.splitlines()
        if ln.startswith("mininet>")
    )
    change = next((yaml.safe_load(body) for info, body in blocks if info == "yaml lab-change"), None)
    expect = next((yaml.safe_load(body) for info, body in blocks if info == "yaml lab-expect"), None)
    fixed = next((yaml.safe_load(body) for info, body in blocks if info == "yaml lab-check"), [])
    if not isinstance(change, dict) or len(change) != 1:
        raise ValueError(f"{path.name}: expected a `yaml lab-change` block with one setting")
    if not isinstance(expect, list) or not expect:
        raise ValueError(f"{path.name}: expected a `yaml lab-expect` block with a list of checks")
    if not isinstance(fixed, list):
        raise ValueError(f"{path.name}: the `yaml lab-check` block must be a list of checks")
    return LabSheet(path, scenario, argv, cli, change, tuple(expect), tuple(fixed))


def _step(node: Any, rest: str, dotted: str) -> tuple[Any, str]:
    """The key (or list index) that ``rest`` starts with, and what follows it: keys may hold dots and colons
    (a sweep's ``workload.0.algorithm``, a queue's ``l1:l1-l1h1``), so the longest key that fits wins."""
    if isinstance(node, list):
        head, _, tail = rest.partition(".")
        return int(head), tail
    for key in sorted((k for k in node if rest == k or rest.startswith(f"{k}.")), key=len, reverse=True):
        return key, rest[len(key) + 1 :]
    raise KeyError(f"{dotted}: no {rest!r} there (a change edits a setting the file has)")


def set_dotted(data: Any, dotted: str, value: Any) -> None:
    """Set ``a.b.0.c`` in nested mappings and lists; KeyError names a missing step."""
    node, rest = data, dotted
    while True:
        key, rest = _step(node, rest, dotted)
        if not rest:
            node[key] = value
            return
        node = node[key]


def get_dotted(data: Any, dotted: str) -> Any:
    """The value at ``a.b.0.c`` (``queues.l1:l1-l1h1.drops`` in a summary); KeyError names a missing step."""
    node, rest = data, dotted
    while rest:
        key, rest = _step(node, rest, dotted)
        node = node[key]
    return node


def check(item: dict[str, Any], summaries: list[dict[str, Any]]) -> tuple[bool, str]:
    """One expectation against the points' summaries (in sweep order): (passed, what was seen)."""
    value = get_dotted(summaries[int(item["point"])], str(item["metric"]))
    if "over" in item:
        value = float(value) / float(get_dotted(summaries[int(item["over"])], str(item["metric"])))
    seen = f"{item['metric']} at point {item['point']}" + (f" over point {item['over']}" if "over" in item else "")
    if "about" in item:
        lo, hi = (float(x) * float(item["about"]) for x in item["within"])
        return lo <= float(value) <= hi, f"{seen}: {value:.3g}, expected {lo:.3g}-{hi:.3g}"
    if "at_most" in item:
        return float(value) <= float(item["at_most"]), f"{seen}: {value:.3g}, expected <= {item['at_most']}"
    if "at_least" in item:
        return float(value) >= float(item["at_least"]), f"{seen}: {value:.3g}, expected >= {item['at_least']}"
    if "matches" in item:
        return bool(re.fullmatch(str(item["matches"]), str(value))), f"{seen}: {value!r}, expected {item['matches']}"
    raise ValueError(f"expectation {item} has no about/at_most/at_least/matches")


def run_summaries(directory: Path) -> list[dict[str, Any]]:
    """The summaries of the run records under ``directory``, in the order they ran (their names start with
    their start time): a sweep's points in sweep order."""
    import json

    runs = sorted(p.parent for p in Path(directory).glob("*/manifest.json") if (p.parent / "summary.json").exists())
    if not runs:
        raise ValueError(f"{directory}: no run record with a summary.json here (run the scenario with -o {directory})")
    return [json.loads((r / "summary.json").read_text()) for r in runs]


def check_fix(sheet: LabSheet, summaries: list[dict[str, Any]]) -> list[tuple[bool, str]]:
    """The sheet's lab-check items against a run's summaries."""
    return [check(item, summaries) for item in sheet.fixed]


def main(argv: list[str] | None = None) -> int:
    """``check SHEET DIR``: did the fix work? One line per check, exit 0 when all pass."""
    import argparse

    ap = argparse.ArgumentParser(prog="python3 -m scenarios.lab_sheets", description="check a break-fix lab's fix")
    ap.add_argument("what", choices=["check"])
    ap.add_argument("sheet", type=Path, help="the lab sheet (docs/labs/*.md)")
    ap.add_argument("runs", type=Path, help="the -o directory of your run")
    args = ap.parse_args(argv)
    sheet = parse(args.sheet)
    if not sheet.fixed:
        print(f"{args.sheet.name} has no lab-check block: it is not a break-fix lab")
        return 2
    results = check_fix(sheet, run_summaries(args.runs))
    for ok, seen in results:
        print(f"{'ok  ' if ok else 'FAIL'}  {seen}")
    print("the fix worked" if all(ok for ok, _ in results) else "not fixed yet")
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
