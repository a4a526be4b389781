"""Today's summary and guardrails equal what the row-by-row code (before the columnar rewrite) computed on the same
records: real records of the shipped scenarios, cut short (tests/data/make_record_fixtures.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from results.fidelity import evaluate_run
from results.metrics import summarize
from results.record import load_run


def differences(got: Any, want: Any, where: str = "") -> list[str]:
    """Where two JSON-like values differ: numbers to 1e-9 relative, everything else exactly."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: missing" for k in want if k not in got]
        out += [f"{where}.{k}: not expected" for k in got if k not in want]
        for k in want:
            if k in got:
                out += differences(got[k], want[k], f"{where}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(got)} items, expected {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True)) for d in differences(g, w, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers) and not isinstance(want, bool):
        same = math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(got) and math.isnan(want))
        return [] if same else [f"{where}: {got!r}, expected {want!r}"]
    return [] if got == want else [f"{where}: {got!r}, expected {want!r}"]


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def test_the_archive_holds_the_shipped_scenarios(records: list[Path]) -> None:
    assert len(records) >= 10, [p.name for p in records]


def test_summary_equals_the_row_by_row_code(records: list[Path]) -> None:
    for path in records:
        want = json.loads((path / "expected.json").read_text())["summary"]
        got = _json(summarize(load_run(path)))
        assert not differences(got, want), (path.name, differences(got, want)[:10])


def test_guardrails_equal_the_row_by_row_code(records: list[Path]) -> None:
    for path in records:
        want = json.loads((path / "expected.json").read_text())["fidelity"]
        run = load_run(path)
        window = run.manifest.get("traffic_window")
        got = _json(evaluate_run(run, window=tuple(window) if window else None))
        assert not differences(got, want), (path.name, differences(got, want)[:10])


def test_differences_sees_a_changed_number() -> None:
    assert differences({"a": [1.0, {"b": 2}]}, {"a": [1.0, {"b": 2}]}) == []
    assert differences({"a": [1.0, {"b": 2.001}]}, {"a": [1.0, {"b": 2}]}) == [".a[1].b: 2.001, expected 2"]
