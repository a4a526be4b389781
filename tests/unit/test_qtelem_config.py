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


def test_availability_names_a_missing_object(tmp_path):
    from testbed.telemetry.qtelem import availability

    why = availability(tmp_path / "qtelem.bpf.o")
    assert why is not None and "python3 -m testbed.ecn.build" in why


def test_doctor_row_says_why_the_kernel_telemetry_is_missing(monkeypatch, tmp_path):
    from testbed import machine
    from testbed.telemetry import qtelem

    monkeypatch.setattr(qtelem, "OBJECT", tmp_path / "absent.o")
    monkeypatch.setattr(qtelem.availability, "__defaults__", (tmp_path / "absent.o",))
    what, status, disables, _ = machine.queue_telemetry_row()
    assert what.startswith("Kernel queue telemetry")
    assert status == "MISSING" and "polled only" in disables and "absent.o" in disables
