"""Figure (e), headroom: one line per scenario from its records, against the 60% / 2% targets."""

from __future__ import annotations

from typing import Any

from bench.headroom import lines


def _manifest(name: str, mean: float, sat: float, harness: float, faithful: bool = True) -> dict[str, Any]:
    return {
        "scenario_name": name,
        "status": "complete",
        "variant": {"x": mean},
        "fidelity": {
            "faithful": faithful,
            "checks": [{"name": "cpu_saturation", "ok": True, "value": sat, "details": {"mean_busy": mean}}],
        },
        "cpu_budget": {"harness_share": harness},
    }


def test_one_line_per_scenario_with_its_worst_point() -> None:
    out = lines([_manifest("b", 0.41, 0.0, 0.2), _manifest("b", 0.55, 0.01, 0.25), _manifest("a", 0.7, 0.05, 0.3)])
    assert [d["scenario"] for _, d in out] == ["a", "b"]
    a, b = (line for line, _ in out)
    assert "mean CPU max 70%" in a and "saturated samples max 5%" in a and "MISSES the targets at 1 point" in a
    assert "2 points, 2 faithful" in b and "mean CPU max 55%" in b and "harness share max 25%" in b and "fits" in b
