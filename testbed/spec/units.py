"""Parse and format rates and sizes as written in scenario files.

Conventions (documented in README):
- rates are bits per second, SI prefixes: ``100Mbit`` = 100_000_000 bit/s; ``bps`` is a synonym of ``bit``
  (``10Gbps``); a bare number is bit/s.
- sizes are bytes with SI prefixes (``KB`` = 1000 bytes) or binary ones (``KiB`` = 1024 bytes); ``20pkt`` (or
  ``20p``, ``20packets``) is a size in packets; a bare number is bytes.
- durations: ``10ms``, ``250us``, ``2s``; a bare number is seconds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from testbed.errors import TestbedError

_NUM = r"([-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)"  # signed: "-5Mbit" is refused as negative

_RATE_UNITS = {
    "": 1,
    "bit": 1,
    "bps": 1,
    "kbit": 10**3,
    "kbps": 10**3,
    "mbit": 10**6,
    "mbps": 10**6,
    "gbit": 10**9,
    "gbps": 10**9,
    "tbit": 10**12,
    "tbps": 10**12,
}

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}

_PKT_UNITS = ("p", "pkt", "pkts", "packet", "packets")

_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


class UnitError(TestbedError, ValueError):
    """A value that cannot be read as the unit it should carry."""


def _split(text: str, what: str) -> tuple[float, str]:
    m = re.fullmatch(_NUM + r"\s*([a-zA-Z]*)", text.strip())
    if not m:
        raise UnitError(f"{text!r} is not a {what} (expected a number and a unit, e.g. {_EXAMPLES[what]})")
    return float(m.group(1)), m.group(2).lower()


def _number(value: object, what: str) -> tuple[float, str]:
    """The number and the (lower-case) unit of a YAML scalar: a finite int or float, or a string like '100Mbit'."""
    if isinstance(value, bool):
        raise UnitError(f"{value!r} is not a {what}")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    elif isinstance(value, str):
        number, unit = _split(value, what)
    else:
        raise UnitError(f"{value!r} is not a {what}")
    if not math.isfinite(number):
        raise UnitError(f"{value!r} is not a finite {what}")
    return number, unit


_EXAMPLES = {"rate": "'100Mbit'", "size": "'300KB' or '20pkt'", "duration": "'10ms'"}


def parse_rate(value: object) -> int:
    """Return a rate in bit/s; raise UnitError on anything that is not a positive rate."""
    number, unit = _number(value, "rate")
    if unit not in _RATE_UNITS:
        raise UnitError(f"unknown rate unit {unit!r} in {value!r} (use bit, kbit, Mbit, Gbit; bps synonyms)")
    bits = number * _RATE_UNITS[unit]
    if bits <= 0:
        raise UnitError(f"rate must be positive, got {value!r}")
    return int(round(bits))


@dataclass(frozen=True)
class Size:
    """A queue size or threshold: a count of bytes or of packets."""

    value: int
    unit: Literal["bytes", "packets"] = "bytes"

    def to_bytes(self, mtu: int) -> int:
        """Bytes, counting a packet as one full frame (MTU + 14-byte Ethernet header)."""
        return self.value if self.unit == "bytes" else self.value * (mtu + 14)

    def __str__(self) -> str:
        return f"{self.value}pkt" if self.unit == "packets" else format_bytes(self.value)


def parse_size(value: object, allow_zero: bool = False) -> Size:
    """Return a Size; raise UnitError on anything that is not a non-negative size."""
    if isinstance(value, Size):
        return value
    number, unit = _number(value, "size")
    if unit in _PKT_UNITS:
        size = Size(int(round(number)), "packets")
    elif unit in _BYTE_UNITS:
        size = Size(int(round(number * _BYTE_UNITS[unit])), "bytes")
    else:
        raise UnitError(f"unknown size unit {unit!r} in {value!r} (use B, KB, MB, KiB, MiB or pkt)")
    if size.value < 0 or (size.value == 0 and not allow_zero):
        raise UnitError(f"size must be positive, got {value!r}")
    return size


def parse_bytes(value: object) -> int:
    """A size that must be in bytes (message sizes, buffers of traffic generators)."""
    size = parse_size(value)
    if size.unit != "bytes":
        raise UnitError(f"{value!r} must be a size in bytes, not packets")
    return size.value


def parse_duration(value: object) -> float:
    """Return seconds (>= 0)."""
    number, unit = _number(value, "duration")
    if unit not in _TIME_UNITS:
        raise UnitError(f"unknown time unit {unit!r} in {value!r} (use s, ms, us)")
    seconds = number * _TIME_UNITS[unit]
    if seconds < 0:
        raise UnitError(f"duration must not be negative, got {value!r}")
    return seconds


def format_rate(bits_per_s: float) -> str:
    for unit, factor in (("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= factor:
            return f"{bits_per_s / factor:g}{unit}"
    return f"{bits_per_s:g}bit"


def format_bytes(n: float) -> str:
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= factor:
            return f"{n / factor:g}{unit}"
    return f"{n:g}B"
