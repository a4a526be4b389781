"""The kernel telemetry's settings are refused before anything is loaded when they cannot work (pure)."""

from __future__ import annotations

import pytest

from testbed.telemetry.qtelem import RING_MEMORY_CAP, SLOT_DTYPE, QtelemError, check_config, ring_slots_for


def test_ring_holds_two_drains_as_a_power_of_two() -> None:
    assert ring_slots_for(100_000, 0.25) == 8192  # 5,000 slots in two 0.25 s drains
    assert ring_slots_for(1_000_000, 0.25) == 1024  # never under 1024
    n = check_config(100_000, 0.25, 40)
    assert n == 8192 and n * 40 * SLOT_DTYPE.itemsize <= RING_MEMORY_CAP


def test_slot_under_10_us_is_refused() -> None:
    with pytest.raises(QtelemError, match=r"slot 5 us is under the 10 us minimum"):
        check_config(5_000, 0.25, 4)


def test_slot_needing_more_ring_memory_than_the_cap_is_refused() -> None:
    with pytest.raises(QtelemError, match=r"needs \d+ MiB of rings .* over the 64 MiB cap: use a longer slot"):
        check_config(10_000, 0.25, 200)


def test_port_count_is_bounded() -> None:
    with pytest.raises(QtelemError, match="257 ports"):
        check_config(100_000, 0.25, 257)
