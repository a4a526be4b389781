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
    parse_tc_time,
)

# Known answers from iproute2's lib/utils_math.c: get_rate()'s suffixes[] (bit/s per unit; *bps are BYTES/s) and
# get_size64() (k/kb = 1024 B, kbit = 1024/8 B), all case-insensitive.
TC_RATES = [
    ("100Mbit", 100_000_000),
    ("100mbit", 100_000_000),
    ("100MBIT", 100_000_000),
    ("1.5kbit", 1500),
    ("42bit", 42),
    ("1Kibit", 1024),
    ("2mibit", 2 * 2**20),
    ("1gibit", 2**30),
    ("10Gbit", 10_000_000_000),
    ("1tbit", 10**12),
    ("1tibit", 2**40),
    ("100bps", 800),
    ("250 kbps", 2_000_000),
    ("100mbps", 800_000_000),
    ("100MBps", 800_000_000),
    ("10Gbps", 80_000_000_000),
    ("1tbps", 8 * 10**12),
    ("1KiBps", 8192),
    ("1mibps", 8 * 2**20),
    ("1gibps", 8 * 2**30),
    ("1tibps", 8 * 2**40),
    (".5mbit", 500_000),
    ("1e3kbit", 1_000_000),
]


@pytest.mark.parametrize(("text", "bits"), TC_RATES)
def test_parse_rate_means_what_tc_means(text: object, bits: int) -> None:
    assert parse_rate(text) == bits


@pytest.mark.parametrize("bad", ["0Mbit", 0, -5, "-100Mbit", "-1"])
def test_rate_not_positive_says_so(bad: object) -> None:
    with pytest.raises(UnitError, match="must be positive"):
        parse_rate(bad)


@pytest.mark.parametrize("bare", ["100", 100, 2.5e6, "1e6"])
def test_a_bare_rate_is_refused_naming_both_readings(bare: object) -> None:
    with pytest.raises(UnitError, match=r"bare number is ambiguous.*tc reads .* bit/s, Mininet's bw= as .* Mbit/s"):
        parse_rate(bare)


@pytest.mark.parametrize("bad", ["100M", "10G", "64k", "1mb", "10MByte", "5mbits", "3 furlongs"])
def test_rate_units_tc_does_not_know_are_refused(bad: str) -> None:
    with pytest.raises(UnitError, match=r"unknown rate unit .* tc's rate units are bit, kbit.*BYTES/s"):
        parse_rate(bad)


@pytest.mark.parametrize("bad", ["fast", "Mbit", "", None, True, [100], "1.2.3Mbit"])
def test_rate_garbage(bad: object) -> None:
    with pytest.raises(UnitError):
        parse_rate(bad)


TC_SIZES = [
    ("1500", 1500),
    (1500, 1500),
    ("1500b", 1500),
    ("1500B", 1500),
    ("64k", 65_536),
    ("64K", 65_536),
    ("64kb", 65_536),
    ("64KB", 65_536),
    ("30KB", 30_720),
    ("300KB", 307_200),
    ("2m", 2 * 2**20),
    ("4MB", 4 * 2**20),
    ("10G", 10 * 2**30),
    ("2gb", 2 * 2**30),
    ("64kbit", 8192),
    ("1mbit", 2**17),
    ("1gbit", 2**27),
    ("1.5k", 1536),
    ("0.7k", 716),  # tc truncates a fraction of a byte: 716.8
    ("1.5kbit", 192),
]


@pytest.mark.parametrize(("text", "n"), TC_SIZES)
def test_parse_size_means_what_tc_means(text: object, n: int) -> None:
    assert parse_size(text) == Size(n)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1MiB", Size(1_048_576)),
        ("4KiB", Size(4096)),
        ("1GiB", Size(2**30)),
        ("1500 bytes", Size(1500)),
        ("20pkt", Size(20, "packets")),
        ("20p", Size(20, "packets")),
        ("20 packets", Size(20, "packets")),
        ("1pkts", Size(1, "packets")),
    ],
)
def test_our_own_size_spellings(text: object, size: Size) -> None:
    assert parse_size(text) == size


def test_size_passthrough_and_zero() -> None:
    s = Size(7, "packets")
    assert parse_size(s) is s
    assert parse_size(0, allow_zero=True) == Size(0)
    with pytest.raises(UnitError, match="must be positive"):
        parse_size(0)
    with pytest.raises(UnitError, match="must be positive"):
        parse_size("-5KB")  # signed numbers are read, then refused as negative
    with pytest.raises(UnitError, match=r"unknown size unit 'furlong'.* tc's size units are b, k/KB"):
        parse_size("3furlong")
    with pytest.raises(UnitError, match="unknown size unit 'tb'"):
        parse_size("1TB")  # tc has no terabytes for a size
    with pytest.raises(UnitError):
        parse_size(False)


def test_size_to_bytes_counts_full_frames() -> None:
    assert Size(10, "packets").to_bytes(1500) == 10 * 1514
    assert Size(10, "packets").to_bytes(9000) == 10 * 9014
    assert Size(30_000).to_bytes(9000) == 30_000
    assert str(Size(20, "packets")) == "20pkt"
    assert str(Size(30_720)) == "30KB"
    assert str(Size(30_000)) == "30000B"


def test_parse_bytes_refuses_packets() -> None:
    assert parse_bytes("4MB") == 4 * 2**20
    assert parse_bytes("4MiB") == 4 * 2**20
    with pytest.raises(UnitError, match="not packets"):
        parse_bytes("4pkt")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10ms", 0.01),
        ("250us", 250e-6),
        ("2s", 2.0),
        ("5", 5.0),
        (0, 0.0),
        (1.5, 1.5),
        ("100ns", 1e-7),
        ("10msec", 0.01),
        ("3usecs", 3e-6),
        ("2sec", 2.0),
    ],
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


@pytest.mark.parametrize(("text", "seconds"), [("40ms", 0.04), ("250us", 250e-6), ("2sec", 2.0), (0, 0.0), ("0", 0.0)])
def test_a_tc_time_reads_as_a_duration(text: object, seconds: float) -> None:
    assert parse_tc_time(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bare", [40, "40", 2.5, "1e3"])
def test_a_bare_tc_time_is_refused_naming_both_readings(bare: object) -> None:
    """tc's get_time reads a bare number as microseconds, a duration here as seconds: neither is assumed."""
    with pytest.raises(UnitError, match=r"bare number is ambiguous as a time: tc reads .* as .* microseconds, a "):
        parse_tc_time(bare)
    assert parse_duration(bare) == float(str(bare))  # a duration elsewhere keeps seconds


def test_a_tc_time_refuses_what_a_duration_refuses() -> None:
    for bad in ("-1ms", "3h", True):
        with pytest.raises(UnitError):
            parse_tc_time(bad)


def test_format() -> None:
    assert format_rate(100e6) == "100Mbit"
    assert format_rate(2.5e9) == "2.5Gbit"
    assert format_rate(1500) == "1.5kbit"
    assert format_rate(12) == "12bit"
    assert format_bytes(307_200) == "300KB"
    assert format_bytes(300_000) == "300000B"  # not a whole number of KB: written exactly
    assert format_bytes(3 * 2**20) == "3MB"
    assert format_bytes(2**30) == "1GB"
    assert format_bytes(999) == "999B"
    # round trip: what format_* writes, parse_* reads back
    for bits in (100_000, 12_500_000, 1_000_000_000):
        assert parse_rate(format_rate(bits)) == bits
    for n in (1514, 300_000, 307_200, 4_000_000, 2**22):
        assert parse_size(format_bytes(n)).value == n
