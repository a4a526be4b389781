"""DCTCP's queue model as the K scenario judges it (scenarios/stock_helpers.DctcpSawtooth): known answers from the
paper's own algebra."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scenarios"))

from stock_helpers import DctcpSawtooth


@pytest.mark.parametrize("bdp", [28.0, 100.0, 1000.0])
def test_the_rule_is_where_the_worst_case_queue_touches_empty(bdp: float) -> None:
    """Q_min = K + N - sqrt(2N(C x RTT + K)) / 2 is smallest at N = (C x RTT + K) / 8, where it is K - (C x RTT + K) / 8:
    zero exactly at K = C x RTT / 7, the paper's rule."""
    k = bdp / 7
    n = (bdp + k) / 8
    frame = 1000.0
    m = DctcpSawtooth.of(rate_bps=bdp * frame * 8, rtt_s=1.0, k_bytes=k * frame, frame_bytes=frame, flows=n)
    assert m.q_min == pytest.approx(0.0, abs=1e-9)
    assert m.empty_share == pytest.approx(0.0, abs=1e-9)


def test_k_below_the_rule_empties_the_queue_for_part_of_each_cycle() -> None:
    """The K scenario's low point: 3 flows, C x RTT = 250,000 B, K = 9000 B, 9014-byte frames."""
    bdp, k = 250_000 / 9014, 9000 / 9014
    m = DctcpSawtooth.of(rate_bps=25e6, rtt_s=0.08, k_bytes=9000, frame_bytes=9014, flows=3)
    amplitude = math.sqrt(2 * 3 * (bdp + k)) / 2
    assert m.amplitude == pytest.approx(amplitude)
    assert m.q_min == pytest.approx(k + 3 - amplitude)
    assert m.empty_share == pytest.approx((amplitude - k - 3) / amplitude)
    assert 0.38 < m.empty_share < 0.40


def test_k_above_the_rule_never_empties_the_queue() -> None:
    m = DctcpSawtooth.of(rate_bps=25e6, rtt_s=0.08, k_bytes=72_000, frame_bytes=9014, flows=3)
    assert m.q_min > 3
    assert m.empty_share == 0.0
