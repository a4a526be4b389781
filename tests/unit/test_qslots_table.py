"""The kernel telemetry's table: slots to rows, in the schema's columns, on the record's clock (pure)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from testbed.spec.scenario import TelemetrySpec
from testbed.spec.schemas import SCHEMAS
from testbed.telemetry.budget import role_of
from testbed.telemetry.qslots import QslotsConfig, slots_frame
from testbed.telemetry.qtelem import SLOT_DTYPE, QtPort


def test_slots_become_rows_in_port_then_time_order() -> None:
    cfg = QslotsConfig((QtPort("tb1-l1", "l1-s1", 1e8, "l1"), QtPort("tb1-s1", "s1-l2", 1e8, "s1")), slot_ns=100_000)
    s = np.zeros(3, dtype=SLOT_DTYPE)
    s["port"] = [1, 0, 0]
    s["slot"] = [7, 9, 8]
    s["backlog_max"] = [3028, 1514, 4542]
    s["soj"][2, 9] = 2  # two packets of 256-511 us
    df = slots_frame(s, cfg, wall_minus_mono=1000.0)
    assert tuple(df.columns) == SCHEMAS["qslots"][0]
    assert list(df["node"]) == ["l1", "l1", "s1"] and list(df["dev"]) == ["l1-s1", "l1-s1", "s1-l2"]
    assert np.allclose(df["t"], [1000.0008, 1000.0009, 1000.0007])
    assert list(df["backlog_max"]) == [4542, 1514, 3028]
    assert list(df["soj_b9"]) == [2, 0, 0]


def test_config_round_trips(tmp_path: Path) -> None:
    cfg = QslotsConfig((QtPort("tb1-l1", "l1-s1", 5e7, "l1"),), slot_ns=50_000, drain_s=0.25)
    (tmp_path / "c.json").write_text(__import__("json").dumps(cfg.to_dict()))
    assert QslotsConfig.load(tmp_path / "c.json") == cfg


def test_scenario_knob_and_budget_role() -> None:
    assert TelemetrySpec.from_dict({"bpf_queues": True}, "telemetry") == TelemetrySpec(bpf_queues=True)
    assert role_of("telemetry-qslots", ["/usr/bin/python3", "-m", "testbed.telemetry.qslots"]) == "qtelem"
