"""testbed.spec.units: rates, sizes and durations as scenario files write them (no root)."""

from __future__ import annotations

import pytest

from testbed.spec.units import (
    Size,
    UnitError,
    format_bytes,
    format_rate,
    parse_bytes,
    parse_duration,
    parse_rate,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "bits"),
    [
        ("100Mbit", 100_000_000),
        ("100mbit", 100_000_000),
        ("10Gbps", 10_000_000_000),
        ("1.5kbit", 1500),
        ("250 kbps", 250_000),
        ("1e6", 1_000_000),
        ("42bit", 42),
        (5_000_000, 5_000_000),
        (2.5e6, 2_500_000),
    ],
)
def test_parse_rate(text: object, bits: int) -> None:
    assert parse_rate(text) == bits


@pytest.mark.parametrize("bad", ["0Mbit", 0, -5, "-100Mbit", "-1"])
def test_rate_not_positive_says_so(bad: object) -> None:
    with pytest.raises(UnitError, match="must be positive"):
        parse_rate(bad)


@pytest.mark.parametrize("bad", ["fast", "100 furlongs", "Mbit", "", None, True, [100], "1.2.3Mbit"])
def test_rate_garbage(bad: object) -> None:
    with pytest.raises(UnitError):
        parse_rate(bad)


def test_rate_unknown_unit_names_it() -> None:
    with pytest.raises(UnitError, match="unknown rate unit 'mbyte'"):
        parse_rate("10MByte")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("300KB", Size(300_000)),
        ("300kb", Size(300_000)),
        ("1MiB", Size(1_048_576)),
        ("4KiB", Size(4096)),
        ("2GB", Size(2_000_000_000)),
        ("1500", Size(1500)),
        (1500, Size(1500)),
        ("1500B", Size(1500)),
        ("20pkt", Size(20, "packets")),
        ("20p", Size(20, "packets")),
        ("20 packets", Size(20, "packets")),
        ("1pkts", Size(1, "packets")),
    ],
)
def test_parse_size(text: object, size: Size) -> None:
    assert parse_size(text) == size


def test_size_passthrough_and_zero() -> None:
    s = Size(7, "packets")
    assert parse_size(s) is s
    assert parse_size(0, allow_zero=True) == Size(0)
    with pytest.raises(UnitError, match="must be positive"):
        parse_size(0)
    with pytest.raises(UnitError, match="must be positive"):
        parse_size("-5KB")  # signed numbers are read, then refused as negative
    with pytest.raises(UnitError, match="unknown size unit 'furlong'"):
        parse_size("3furlong")
    with pytest.raises(UnitError):
        parse_size(False)


def test_size_to_bytes_counts_full_frames() -> None:
    assert Size(10, "packets").to_bytes(1500) == 10 * 1514
    assert Size(10, "packets").to_bytes(9000) == 10 * 9014
    assert Size(30_000).to_bytes(9000) == 30_000
    assert str(Size(20, "packets")) == "20pkt"
    assert str(Size(30_000)) == "30KB"


def test_parse_bytes_refuses_packets() -> None:
    assert parse_bytes("4MB") == 4_000_000
    assert parse_bytes("4MiB") == 4 * 2**20
    with pytest.raises(UnitError, match="not packets"):
        parse_bytes("4pkt")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10ms", 0.01), ("250us", 250e-6), ("2s", 2.0), ("5", 5.0), (0, 0.0), (1.5, 1.5), ("100ns", 1e-7)],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ("-1ms", "must not be negative"),
        (-2, "must not be negative"),
        ("3h", "unknown time unit"),
        ("soon", "not a duration"),
        (True, "not a duration"),
    ],
)
def test_duration_bad(bad: object, match: str) -> None:
    with pytest.raises(UnitError, match=match):
        parse_duration(bad)


def test_format() -> None:
    assert format_rate(100e6) == "100Mbit"
    assert format_rate(2.5e9) == "2.5Gbit"
    assert format_rate(1500) == "1.5kbit"
    assert format_rate(12) == "12bit"
    assert format_bytes(300_000) == "300KB"
    assert format_bytes(1.5e6) == "1.5MB"
    assert format_bytes(999) == "999B"
    # round trip: what format_* writes, parse_* reads back
    for bits in (100_000, 12_500_000, 1_000_000_000):
        assert parse_rate(format_rate(bits)) == bits
    for n in (1514, 300_000, 4_000_000):
        assert parse_size(format_bytes(n)).value == n
