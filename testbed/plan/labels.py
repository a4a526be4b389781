"""A scenario point as the user knows it, for messages and tables: its scenario's name and its sweep values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def variant_text(point: Any) -> str:
    """A sweep point's values, short: ``ecn={mode: step, k: 30KB}, buffer=100KB`` (empty without a sweep)."""
    return ", ".join(f"{k.split('.')[-1]}={_short(v)}" for k, v in getattr(point, "variant", ()) or ())


def point_label(point: Any) -> str:
    """A sweep point as the user knows it: the scenario's name and its sweep values."""
    values = variant_text(point)
    return f"scenario {point.name!r}" + (f" point [{values}]" if values else "")


def _short(v: Any) -> str:
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k}: {_short(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_short(x) for x in v) + "]"
    return str(v)
