"""The kernel telemetry's settings are refused before anything is loaded when they cannot work and its reader's ring arithmetic holds (pure)."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.telemetry import qtelem
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
    assert why is not None and "python3 -m testbed.bpf.build" in why


def test_doctor_row_says_why_the_kernel_telemetry_is_missing(monkeypatch, tmp_path):
    from testbed import machine
    from testbed.telemetry import qtelem

    monkeypatch.setattr(qtelem, "OBJECT", tmp_path / "absent.o")
    monkeypatch.setattr(qtelem.availability, "__defaults__", (tmp_path / "absent.o",))
    what, status, disables, _ = machine.queue_telemetry_row()
    assert what.startswith("Kernel queue telemetry")
    assert status == "MISSING" and "polled only" in disables and "absent.o" in disables


def _reader(heads: list[int], tails: list[int], ring_slots: int = 1024) -> qtelem.QueueTelemetry:
    """A QueueTelemetry's reader half over plain arrays (no kernel): state heads and its own tails."""
    qt = object.__new__(qtelem.QueueTelemetry)
    qt.ports = [qtelem.QtPort("ns", f"d{i}", 1e8, "n") for i in range(len(heads))]
    qt.ring_slots, qt.lost_slots = ring_slots, 0
    qt.state = np.zeros(len(heads), dtype=qtelem.STATE_DTYPE)
    qt.state["head"] = heads
    qt._tail = np.array(tails, dtype=np.uint64)
    return qt


def test_drain_spans_wrap_and_count_overwritten_slots() -> None:
    size, n = qtelem.SLOT_DTYPE.itemsize, 1024
    qt = _reader([n + 10, 5, 3000], [n - 6, 5, 0])
    spans = qt._spans()
    # port 0 wrapped: 6 slots at the ring's end, then 10 at its start; port 1 idle; port 2 lapped by its writer
    assert spans[:2] == [((n - 6) * size, n * size), (0, 10 * size)]
    keep = n - qtelem.RING_MARGIN
    assert qt.lost_slots == 3000 - keep
    a, b = (3000 - keep) % n, 3000 % n
    assert spans[2:] == [(2 * n * size + a * size, 2 * n * size + n * size), (2 * n * size, 2 * n * size + b * size)]
    assert list(qt._tail) == [n + 10, 5, 3000]
    assert qt._spans() == []  # nothing new


def test_settle_clears_the_sojourn_flag_and_unwritten_histograms() -> None:
    s = np.zeros(2, dtype=qtelem.SLOT_DTYPE)
    s["port"] = [qtelem.SLOT_SOJ | 7, 7]
    s["soj"] = 3  # the second slot's histogram line is an older slot's: the program did not write it
    qtelem.settle(s)
    assert list(s["port"]) == [7, 7]
    assert list(s["soj"].sum(axis=1)) == [48, 0]
