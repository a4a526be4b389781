"""Did the compared variants share their flow placement? A pure reading of the runs' placement tables.

A comparison changes one thing only if every variant's flows took the same source ports, and so (under static
ECMP hashing) the same spines, in the same repeat (testbed/spec/placement.py). ``check(rows)`` reads each run's
``placement.csv`` (host, job, flow -> sport), groups the runs by ``repeat_index``, and says whether the runs of
each repeat agree on every flow they have in common, and whether the repeats drew different placements;
``note(rows)`` is its one line for the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from results.compare import Row
from results.record import Run

Placement = dict[tuple[str, str, str], int]


def placement_of(run: Run) -> Placement:
    """(host, job, flow) -> source port from the run's placement.csv; empty when the kernel picked the ports or
    the record predates the table."""
    df = run.table("placement")
    if df.empty:
        return {}
    return {
        (str(h), str(j), str(f)): int(p)
        for h, j, f, p in zip(df["host"], df["job"], df["flow"], df["sport"], strict=True)
    }


def differing(a: Placement, b: Placement) -> tuple[int, int]:
    """(flows on other ports, flows in common) of two placements."""
    common = a.keys() & b.keys()
    return sum(1 for k in common if a[k] != b[k]), len(common)


@dataclass
class PlacementCheck:
    """``repeats``: repeat index -> the variants placed in it; ``split``: (repeat, variant, variant, flows on
    other ports, flows in common) for each variant that disagrees with its repeat's first; ``same_repeats``: pairs
    of repeats that drew the same placement; ``unplaced``: variants with a run whose ports the kernel picked
    (``mode``: its manifest's placement mode, or "not recorded")."""

    repeats: dict[int, list[str]] = field(default_factory=dict)
    split: list[tuple[int, str, str, int, int]] = field(default_factory=list)
    same_repeats: list[tuple[int, int]] = field(default_factory=list)
    unplaced: dict[str, str] = field(default_factory=dict)
    modes: set[str] = field(default_factory=set)


def _mode(manifest: dict[str, Any]) -> str:
    p = manifest.get("placement")
    return str(p.get("mode")) if isinstance(p, dict) and p.get("mode") else "not recorded"


def check(rows: Sequence[Row]) -> PlacementCheck:
    """The placement of every complete run of ``rows`` (results.compare), judged per repeat and across repeats."""
    out = PlacementCheck()
    by_repeat: dict[int, list[tuple[str, Placement]]] = {}
    for row in rows:
        if row.status != "complete":
            continue
        for run in row.runs:
            mode = _mode(run.manifest)
            out.modes.add(mode)
            placed = placement_of(run)
            if not placed:
                out.unplaced[row.variant] = mode
                continue
            by_repeat.setdefault(int(run.manifest.get("repeat_index") or 0), []).append((row.variant, placed))
    firsts: list[tuple[int, Placement]] = []
    for rep, runs in sorted(by_repeat.items()):
        out.repeats[rep] = [v for v, _ in runs]
        base_variant, base = runs[0]
        for variant, placed in runs[1:]:
            moved, common = differing(base, placed)
            if moved or not common:
                out.split.append((rep, base_variant, variant, moved, common))
        firsts.append((rep, base))
    for i, (ra, a) in enumerate(firsts):
        for rb, b in firsts[i + 1 :]:
            moved, common = differing(a, b)
            if common and not moved:
                out.same_repeats.append((ra, rb))
    return out


def note(rows: Sequence[Row]) -> str:
    """One line for the report: did the variants share their placement in each repeat, and did repeats differ
    (empty for a single run, or a single variant's runs whose placement nobody controlled)."""
    c = check(rows)
    variants = {v for vs in c.repeats.values() for v in vs} | set(c.unplaced)
    n = len(c.repeats)
    if not c.repeats:
        if len(variants) < 2:
            return ""
        if set(c.unplaced.values()) == {"not recorded"}:
            how = "not recorded (older records: the kernel picked the source ports)"
        else:
            how = "not controlled (the kernel picked the source ports)"
        return f"Flow placement: {how}, so the variants' flows may have taken different paths."
    if c.split:
        pairs = "; ".join(
            f"repeat {r}: {a} vs {b} " + (f"({m} of {k} flows on other ports)" if k else "(no flow in common)")
            for r, a, b, m, k in c.split
        )
        parts = [f"NOT shared by the variants in {pairs}"]
    elif len(variants) > 1:
        parts = [f"shared by all variants in {'the one repeat' if n == 1 else f'each of {n} repeats'}"]
    elif n == 1:
        return ""
    else:
        parts = []
    if n > 1:
        if not c.same_repeats:
            parts.append(f"new in each of {n} repeats" if not parts else "new in each repeat")
        elif c.modes == {"fixed"}:
            parts.append("the same in every repeat (placement: fixed)")
        else:
            parts.append("the same in repeats " + ", ".join(f"{a} and {b}" for a, b in c.same_repeats))
    if c.unplaced:
        parts.append(f"not controlled (the kernel's ports) in {', '.join(sorted(c.unplaced))}")
    return "Flow placement: " + "; ".join(parts) + "."
