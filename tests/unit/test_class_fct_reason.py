"""A traffic class's FCT p99 cell says why it is empty: too few flows for a p99, or none finished."""

from __future__ import annotations

from results.compare import _class_p99_why
from results.metrics import P50_P99
from results.summary import percentile_fields


def test_a_refused_p99_gives_the_summarys_reason_not_no_finished_flow() -> None:
    entry = percentile_fields([0.001 * i for i in range(1, 6)], P50_P99)  # 5 flows: a p50, no p99
    assert entry["n"] == 5 and entry["p99_s"] is None
    why = _class_p99_why("gold", entry)
    assert why.startswith("class gold: ") and "no finished flow" not in why
    assert why == f"class gold: {entry['not_applicable']['p99_s']}"


def test_a_class_with_no_flow_has_none_finished() -> None:
    assert _class_p99_why("bronze", {}) == "no finished flow in class bronze"
