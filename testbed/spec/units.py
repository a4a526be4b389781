"""Parse and format rates and sizes as written in scenario files, with tc's vocabulary and tc's meaning.

Every rate or size spelling that tc accepts means here what it means to tc. The reference is iproute2's
lib/utils_math.c: get_rate()/get_rate64() with its ``suffixes[]`` table, and get_size64(); both match the unit
case-insensitively (strcasecmp) and truncate a fraction of a byte.

- rates: ``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit`` are bits per second (SI), ``kibit`` ... ``tibit`` binary;
  ``bps``, ``kbps``, ``mbps``, ``gbps``, ``tbps`` are BYTES per second (``100mbps`` = 800 Mbit/s), ``kibps`` ...
  ``tibps`` binary. A bare number is refused: tc reads it as bit/s, Mininet's ``bw=`` as Mbit/s. Units tc does not
  know for a rate (``100M``, ``10G``, ``1mb``) are refused.
- sizes are bytes: a bare number or ``b``; ``k``/``kb`` = 1024, ``m``/``mb`` = 2**20, ``g``/``gb`` = 2**30 bytes;
  ``kbit``/``mbit``/``gbit`` = 1024/8, 2**20/8, 2**30/8 bytes. Our own unambiguous extensions: ``kib``/``mib``/``gib``
  (the same binary values), ``byte(s)``, and ``20pkt`` (or ``20p``, ``20packets``): a size in packets.
- durations: ``10ms``, ``250us``, ``2s``, tc's ``sec``/``msec``/``usec`` spellings; a bare number is seconds
  (a job's duration, a start time), which is not tc's get_time meaning: tc reads a bare time as microseconds. So a
  time that tc itself reads (a link's netem ``delay``, ``parse_tc_time``) must carry its unit; a bare number there
  is refused naming both readings (a bare 0 is the same in both and is accepted).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from testbed.errors import TestbedError

# signed, so that "-5Mbit" is refused as negative; a leading dot (".5mbit") as strtod reads it
_NUM = r"([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"

# tc's rate suffixes in bit/s per unit, keyed lower-case (iproute2 lib/utils_math.c, suffixes[])
_RATE_UNITS: dict[str, int] = {
    "bit": 1,
    "kibit": 2**10,
    "kbit": 10**3,
    "mibit": 2**20,
    "mbit": 10**6,
    "gibit": 2**30,
    "gbit": 10**9,
    "tibit": 2**40,
    "tbit": 10**12,
    "bps": 8,
    "kibps": 8 * 2**10,
    "kbps": 8 * 10**3,
    "mibps": 8 * 2**20,
    "mbps": 8 * 10**6,
    "gibps": 8 * 2**30,
    "gbps": 8 * 10**9,
    "tibps": 8 * 2**40,
    "tbps": 8 * 10**12,
}

# tc's size suffixes in bytes per unit (iproute2 lib/utils_math.c, get_size64); the binary kib/mib/gib and byte(s)
# are ours, and mean what tc's k/m/g mean
_BYTE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kb": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "kbit": 2**10 // 8,
    "mbit": 2**20 // 8,
    "gbit": 2**30 // 8,
    "byte": 1,
    "bytes": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}

_PKT_UNITS = ("p", "pkt", "pkts", "packet", "packets")

_TIME_UNITS = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "ms": 1e-3,
    "msec": 1e-3,
    "msecs": 1e-3,
    "us": 1e-6,
    "usec": 1e-6,
    "usecs": 1e-6,
    "ns": 1e-9,
}


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
    """Return a rate in bit/s as tc reads the spelling; raise UnitError on anything that is not a positive rate."""
    number, unit = _number(value, "rate")
    if number <= 0:
        raise UnitError(f"rate must be positive, got {value!r}")
    if unit == "":
        n = f"{number:.15g}"
        raise UnitError(
            f"a bare number is ambiguous as a rate: tc reads {value!r} as {n} bit/s, Mininet's bw= as {n} Mbit/s; "
            f"write the unit, e.g. '{n}Mbit' or '{n}bit'"
        )
    if unit not in _RATE_UNITS:
        raise UnitError(
            f"unknown rate unit {unit!r} in {value!r}: tc's rate units are bit, kbit, Mbit, Gbit, Tbit (bit/s) and "
            "Bps, KBps, MBps, GBps, TBps (BYTES/s), or Kibit, KiBps ... (binary)"
        )
    bits = number * _RATE_UNITS[unit]
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
    """Return a Size as tc reads the spelling (``64kb`` = 65,536 bytes); raise UnitError on a negative size."""
    if isinstance(value, Size):
        return value
    number, unit = _number(value, "size")
    if unit in _PKT_UNITS:
        size = Size(int(round(number)), "packets")
    elif unit in _BYTE_UNITS:
        size = Size(math.floor(number * _BYTE_UNITS[unit]), "bytes")  # tc truncates a fraction of a byte
    else:
        raise UnitError(
            f"unknown size unit {unit!r} in {value!r}: tc's size units are b, k/KB (1024 B), m/MB (2**20 B), "
            "g/GB (2**30 B), kbit, mbit, gbit; also KiB, MiB, GiB, or pkt for packets"
        )
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
        raise UnitError(f"unknown time unit {unit!r} in {value!r} (use s, ms, us, ns)")
    seconds = number * _TIME_UNITS[unit]
    if seconds < 0:
        raise UnitError(f"duration must not be negative, got {value!r}")
    return seconds


def parse_tc_time(value: object) -> float:
    """Seconds of a time that tc reads itself (netem's delay): as ``parse_duration``, but a bare number other than
    0 is refused, since tc's get_time reads it as microseconds and a duration here as seconds."""
    number, unit = _number(value, "duration")
    if unit == "" and number != 0:
        n = f"{number:.15g}"
        raise UnitError(
            f"a bare number is ambiguous as a time: tc reads {value!r} as {n} microseconds, a duration here as {n} s; "
            f"write the unit, e.g. '{n}ms' or '{n}us'"
        )
    return parse_duration(value)


def format_rate(bits_per_s: float) -> str:
    for unit, factor in (("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= factor:
            return f"{bits_per_s / factor:g}{unit}"
    return f"{bits_per_s:g}bit"


def format_bytes(n: float) -> str:
    """Bytes in tc's binary units where exact (``30KB`` = 30,720 B), else as a count of bytes, so that parse_size
    reads back the same number."""
    if n == int(n):
        for unit, factor in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
            if abs(n) >= factor and int(n) % factor == 0:
                return f"{int(n) // factor}{unit}"
        return f"{int(n)}B"
    return f"{n:g}B"
