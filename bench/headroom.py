"""Figure (e), headroom: how much of this machine each shipped scenario takes, from its run records.

``lines(records)`` groups run records by scenario and gives one line each: points, faithful points, the highest
mean CPU and saturated-sample share of any point (over the traffic window), and the highest harness share
(``cpu_budget``). ``measure(out)`` first runs every native shipped scenario once (no retakes) into ``out``.
The targets leave the emulation headroom by design: a mean of at most 60% of the machine and saturated samples in
at most 2% of samples; a line says which point misses them (docs/bench.md, figure (e)).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

MEAN_MAX = 0.60
SATURATED_MAX = 0.02
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def point_figures(manifest: dict[str, Any]) -> dict[str, Any]:
    """Mean CPU, saturated share, harness share and faithfulness of one record (None where not recorded)."""
    checks = {c.get("name"): c for c in (manifest.get("fidelity") or {}).get("checks") or []}
    sat = checks.get("cpu_saturation") or {}
    budget = manifest.get("cpu_budget") or {}
    return {
        "mean": (sat.get("details") or {}).get("mean_busy", budget.get("busy_share")),
        "saturated": sat.get("value"),
        "harness": budget.get("harness_share"),
        "faithful": (manifest.get("fidelity") or {}).get("faithful"),
        "status": manifest.get("status"),
        "variant": manifest.get("variant") or {},
    }


def _top(points: list[dict[str, Any]], key: str) -> float | None:
    vals = [p[key] for p in points if isinstance(p[key], (int, float))]
    return max(vals) if vals else None


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def lines(manifests: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """One (line, data) per scenario name, in name order."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in manifests:
        by[str(m.get("scenario_name"))].append(point_figures(m))
    out = []
    for name in sorted(by):
        pts = by[name]
        mean, sat, harness = _top(pts, "mean"), _top(pts, "saturated"), _top(pts, "harness")
        faithful = sum(1 for p in pts if p["faithful"] is True)
        misses = [
            p["variant"]
            for p in pts
            if (p["mean"] or 0) > MEAN_MAX or (p["saturated"] or 0) > SATURATED_MAX or p["status"] != "complete"
        ]
        verdict = "fits" if not misses else f"MISSES the targets at {len(misses)} point(s)"
        line = (
            f"(e) headroom {name}: {len(pts)} points, {faithful} faithful | mean CPU max {_pct(mean)} "
            f"(target <= {MEAN_MAX:.0%}) | saturated samples max {_pct(sat)} (target <= {SATURATED_MAX:.0%}) "
            f"| harness share max {_pct(harness)} | {verdict}"
        )
        out.append((line, {"scenario": name, "points": pts, "mean_max": mean, "saturated_max": sat}))
    return out


def native_scenarios() -> list[Path]:
    """The shipped scenario files that run on this kernel (``kernel: native``)."""
    from testbed.spec.scenario import load_scenario_file

    return [p for p in sorted(SCENARIOS.glob("*.yaml")) if load_scenario_file(p).base.kernel == "native"]


def measure(out: Path) -> list[dict[str, Any]]:
    """Run every native shipped scenario once into ``out``; return the records' manifests."""
    import json

    from testbed.machine import here
    from testbed.run import run_file
    from testbed.spec.scenario import load_scenario_file

    manifests = []
    for path in native_scenarios():
        for res in run_file(load_scenario_file(path), out / path.stem, lock_wait=600.0, machine=here(os.environ)):
            manifests.append(json.loads((res.path / "manifest.json").read_text()))
    return manifests
