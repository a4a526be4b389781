"""Scenario judges on measured figures, no root: the figures of a real run, the verdict they must get."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scenarios"))

import test_buffer  # the scenario module, from scenarios/


class FakePoint:
    def __init__(self, kb: int, drops: float, timeouts: float, rtt_p99_ms: float, goodput_mbit: float = 99.0):
        self.variant = {"fabric.host_link.buffer": f"{kb}KB"}
        self._port = {"rate_bps": 100e6, "mtu": 9000, "buffer_bytes": kb * 1000}
        self._drops = drops
        self.summary = {
            "timeouts_total": timeouts,
            "retrans_total": drops,
            "rtt_p50_s": rtt_p99_ms * 0.9e-3,
            "rtt_p99_s": rtt_p99_ms * 1e-3,
            "goodput_bps": goodput_mbit * 1e6,
        }

    def port(self, name: str) -> dict[str, Any]:
        return self._port

    def queue(self, name: str) -> dict[str, Any]:
        return {"drops": self._drops}

    def __getitem__(self, key: str) -> Any:
        return self.summary[key]


class FakeExperiment:
    def __init__(self, points: list[FakePoint], order: list[str]):
        self.points = points
        self.sweep = {"fabric.host_link.buffer": order}

    def where(self, buffer: str) -> FakePoint:
        return next(p for p in self.points if p.variant["fabric.host_link.buffer"] == buffer)

    def expect(self, ok: bool, what: str) -> None:
        if not ok:
            raise AssertionError(what)


# CI of 8818d71: at 30 KB (3 jumbo frames) one flow sat in timeouts at 0.1 Mbit/s and the port dropped only 269
MEASURED = [
    FakePoint(30, 269, 36, 3.05),
    FakePoint(100, 1067, 30, 8.84),
    FakePoint(300, 383, 1, 24.7),
    FakePoint(600, 185, 0, 48.5),
]
DEPTHS = ["30KB", "100KB", "300KB", "600KB"]


def test_buffer_drops_are_judged_from_the_first_tcp_regime_depth() -> None:
    test_buffer.judge_depth(FakeExperiment(MEASURED, DEPTHS))


def test_buffer_reversed_sweep_fails() -> None:
    with pytest.raises(AssertionError, match=r"did not fall|not below"):
        test_buffer.judge_depth(FakeExperiment(MEASURED, list(reversed(DEPTHS))))
