"""Field readers of traffic.specs: numbers, choices, host lists and units, each raising a SpecError that names
the key path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from testbed.spec import SpecError
from testbed.units import UnitError, parse_bytes, parse_duration


def sub(path: str, key: str) -> str:
    return f"{path}.{key}"


def convert(path: str, fn: Any, value: Any) -> Any:
    try:
        return fn(value)
    except UnitError as exc:
        raise SpecError(path, str(exc)) from None


def integer(path: str, value: Any, lo: int, hi: int = 10**9) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SpecError(path, f"expected an integer in [{lo}, {hi}], got {value!r}")
    return value


def number(path: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise SpecError(path, f"expected a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def choice(path: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise SpecError(path, f"must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def host_list(path: str, value: Any, minimum: int = 1) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or len(value) < minimum or not all(isinstance(h, str) for h in value):
        raise SpecError(path, f"expected a list of at least {minimum} host names, got {value!r}")
    if len(set(value)) != len(value):
        raise SpecError(path, f"host names repeat: {value!r}")
    return tuple(value)


def rank_list(path: str, value: Any) -> str | tuple[str, ...]:
    if isinstance(value, str):
        return choice(path, value, ("all", "one_per_leaf", "leaf_interleaved"))
    return host_list(path, value, 2)


def host_pairs(path: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise SpecError(path, f"expected a list of [src, dst] host pairs, got {value!r}")
    out = []
    for i, pair in enumerate(value):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(h, str) for h in pair):
            raise SpecError(f"{path}[{i}]", f"expected [src, dst], got {pair!r}")
        if pair[0] == pair[1]:
            raise SpecError(f"{path}[{i}]", "src and dst are the same host")
        out.append((pair[0], pair[1]))
    return tuple(out)


def ranked_fields(data: Mapping[str, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "ranks" in data:
        out["ranks"] = rank_list(sub(path, "ranks"), data["ranks"])
    if "iterations" in data:
        out["iterations"] = integer(sub(path, "iterations"), data["iterations"], 1, 100_000)
    if "warmup" in data:
        out["warmup"] = integer(sub(path, "warmup"), data["warmup"], 0, 1000)
    for key in ("compute_gap", "timeout"):
        if key in data:
            out[key] = convert(sub(path, key), parse_duration, data[key])
    return out


def size_distribution(path: str, value: Any) -> tuple[tuple[int, float], ...]:
    if not isinstance(value, list):
        return ((convert(path, parse_bytes, value), 1.0),)
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise SpecError(f"{path}[{i}]", f"expected [size, weight], got {item!r}")
        out.append(
            (
                convert(f"{path}[{i}]", parse_bytes, item[0]),
                number(f"{path}[{i}]", item[1], 1e-9, 1e9),
            )
        )
    if not out:
        raise SpecError(path, "empty size distribution")
    return tuple(out)
