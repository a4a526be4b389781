"""The one vocabulary every spec parses with: key checks, numbers, choices, units, host lists, and declared fields.

Each reader takes the key path and the raw value and returns the typed value or raises a ``SpecError`` naming the
path and the reason, in one wording for every spec. ``spec_field`` declares a dataclass field together with the
reader of its scenario key, so that a job kind states each field once: its type, default and reader in one line
(``read_fields`` then parses a mapping into those fields).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from testbed.errors import TestbedError
from testbed.spec.units import UnitError, parse_bytes, parse_duration, parse_rate

Reader = Callable[[str, Any], Any]


class SpecError(TestbedError, ValueError):
    """A scenario value that cannot be built: names the key path and the reason."""

    def __init__(self, path: str, reason: str):
        reason = " ".join(reason.splitlines())  # one line, whatever a quoted value held
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


def sub(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_keys(
    data: Mapping[str, Any], allowed: set[str], path: str, required: set[str] | frozenset[str] = frozenset()
) -> None:
    """A mapping with no key outside ``allowed`` and every key of ``required``."""
    if not isinstance(data, Mapping):
        raise SpecError(path, f"expected a mapping, got {type(data).__name__} {data!r}")
    unknown = sorted(set(data) - allowed, key=str)  # YAML keys may be numbers or null: sort them as text
    if unknown:
        raise SpecError(sub(path, str(unknown[0])), f"unknown key (allowed: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(data))
    if missing:
        raise SpecError(sub(path, missing[0]), "required key is missing")


def unit(path: str, fn: Callable[..., Any], value: Any, *args: Any) -> Any:
    """``fn(value, *args)`` from testbed.spec.units, its UnitError as a SpecError at ``path``."""
    try:
        return fn(value, *args)
    except UnitError as exc:
        raise SpecError(path, str(exc)) from None


def integer(path: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, f"expected an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        raise SpecError(path, f"must be in [{lo}, {hi if hi is not None else 'inf'}], got {value}")
    return value


def number(path: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(path, f"expected a number, got {value!r}")
    if not lo <= float(value) <= hi:
        raise SpecError(path, f"must be in [{lo}, {hi}], got {value}")
    return float(value)


def choice(path: str, value: Any, choices: tuple[str, ...]) -> str:
    if value is False and "off" in choices:  # YAML reads a bare `off` as False
        return "off"
    if value not in choices:
        raise SpecError(path, f"must be one of {', '.join(choices)}, got {value!r}")
    return cast(str, value)


def boolean(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(path, f"expected true or false, got {value!r}")
    return value


def name(path: str, value: Any) -> str:
    """A name of letters, digits, - and _ (job names become file and process names)."""
    if not isinstance(value, str) or not value or not value.replace("_", "").replace("-", "").isalnum():
        raise SpecError(path, f"expected a name of letters, digits, - and _, got {value!r}")
    return value


def host(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(path, f"expected a host name, got {value!r}")
    return value


def host_list(path: str, value: Any, minimum: int = 1) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or len(value) < minimum or not all(isinstance(h, str) for h in value):
        raise SpecError(path, f"expected a list of at least {minimum} host names, got {value!r}")
    if len(set(value)) != len(value):
        raise SpecError(path, f"host names repeat: {value!r}")
    return tuple(value)


RANK_ORDERS = ("all", "one_per_leaf", "leaf_interleaved")


def rank_list(path: str, value: Any) -> str | tuple[str, ...]:
    if isinstance(value, str):
        return choice(path, value, RANK_ORDERS)
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


def size_distribution(path: str, value: Any) -> tuple[tuple[int, float], ...]:
    """One size (``100KB``) or a list of ``[size, weight]``."""
    if not isinstance(value, list):
        return ((unit(path, parse_bytes, value), 1.0),)
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise SpecError(f"{path}[{i}]", f"expected [size, weight], got {item!r}")
        out.append((unit(f"{path}[{i}]", parse_bytes, item[0]), number(f"{path}[{i}]", item[1], 1e-9, 1e9)))
    if not out:
        raise SpecError(path, "empty size distribution")
    return tuple(out)


def text(path: str, value: Any) -> str:
    """A non-empty string (a file path, a label)."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(path, f"expected a non-empty string, got {value!r}")
    return value


def rank_groups(path: str, value: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Named groups of trace ranks, ``{tp0: [0, 1], dp0: [0, 2]}``: each at least 2 distinct ranks."""
    if not isinstance(value, Mapping):
        raise SpecError(path, f"expected a mapping of group name to ranks, got {value!r}")
    out = []
    for name, ranks in value.items():
        where = sub(path, str(name))
        if not isinstance(ranks, list) or len(ranks) < 2:
            raise SpecError(where, f"expected a list of at least 2 ranks, got {ranks!r}")
        got = tuple(integer(f"{where}[{i}]", r, 0) for i, r in enumerate(ranks))
        if len(set(got)) != len(got):
            raise SpecError(where, f"ranks repeat: {list(got)}")
        out.append((str(name), got))
    return tuple(out)


def int_list(minimum: int) -> Reader:
    """A non-empty list of integers, each at least ``minimum``."""

    def read(path: str, value: Any) -> tuple[int, ...]:
        if not isinstance(value, list) or not value:
            raise SpecError(path, f"expected a non-empty list of integers, got {value!r}")
        return tuple(integer(f"{path}[{i}]", v, minimum) for i, v in enumerate(value))

    return Typed(read, "integers", lo=minimum)


def durations(path: str, value: Any) -> tuple[float, ...]:
    """One duration or a non-empty list of them."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise SpecError(path, "expected a duration or a non-empty list of durations")
    return tuple(
        unit(f"{path}[{i}]" if isinstance(value, list) else path, parse_duration, v) for i, v in enumerate(items)
    )


MAX_SWEEP_SIZES = 64


def size_sweep(path: str, value: Any) -> tuple[int, ...]:
    """Message sizes swept the way nccl-tests' ``-b MIN -e MAX -f FACTOR`` does (``{min, max, factor}``, factor
    default 2: MIN, MIN x F, ... up to MAX), or a list of sizes; in increasing order, each at least 1 byte."""
    if isinstance(value, Mapping):
        check_keys(value, {"min", "max", "factor"}, path, {"min", "max"})
        lo, hi = unit(sub(path, "min"), parse_bytes, value["min"]), unit(sub(path, "max"), parse_bytes, value["max"])
        factor = number(sub(path, "factor"), value.get("factor", 2), 1.0 + 1e-9, 1e6)
        if lo < 1:
            raise SpecError(sub(path, "min"), "must be at least 1 byte")
        if hi < lo:
            raise SpecError(sub(path, "max"), f"{hi:,} bytes is below min ({lo:,})")
        out: list[int] = []
        size = float(lo)
        while size <= hi * (1 + 1e-12) and len(out) <= MAX_SWEEP_SIZES:
            out.append(int(round(size)))
            size *= factor
    elif isinstance(value, list) and value:
        out = [unit(f"{path}[{i}]", parse_bytes, v) for i, v in enumerate(value)]
        for i, v in enumerate(out):
            if v < 1:
                raise SpecError(f"{path}[{i}]", "must be at least 1 byte")
            if i and v <= out[i - 1]:
                raise SpecError(f"{path}[{i}]", f"sizes must increase ({v:,} after {out[i - 1]:,})")
    else:
        raise SpecError(path, f"expected {{min, max, factor}} or a list of sizes, got {value!r}")
    if len(out) > MAX_SWEEP_SIZES:
        raise SpecError(path, f"more than {MAX_SWEEP_SIZES} sizes: use a larger factor")
    return tuple(out)


# --- readers for declared fields: (path, raw value) -> typed value -------------------------------------------------


@dataclass(frozen=True)
class Typed:
    """A reader made by ``ints``, ``numbers``, ``one_of``, ``hosts`` or ``int_list``, with what it accepts:
    ``kind`` (integer, number, choice, hosts, integers), its bounds or its choices, so that the scenario reference
    (testbed.spec.reference) can say so."""

    read: Reader
    kind: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()

    def __call__(self, path: str, value: Any) -> Any:
        return self.read(path, value)


def ints(lo: int, hi: int | None = None) -> Reader:
    return Typed(lambda path, v: integer(path, v, lo, hi), "integer", lo, hi)


def numbers(lo: float, hi: float) -> Reader:
    return Typed(lambda path, v: number(path, v, lo, hi), "number", lo, hi)


def one_of(*choices: str) -> Reader:
    return Typed(lambda path, v: choice(path, v, choices), "choice", choices=choices)


def hosts(minimum: int = 1) -> Reader:
    return Typed(lambda path, v: host_list(path, v, minimum), "hosts", lo=minimum)


def bytes_(path: str, value: Any) -> int:
    return cast(int, unit(path, parse_bytes, value))


def duration(path: str, value: Any) -> float:
    return cast(float, unit(path, parse_duration, value))


def rate(path: str, value: Any) -> int:
    return cast(int, unit(path, parse_rate, value))


@dataclass(frozen=True)
class Declared:
    """How a dataclass field is read from a scenario mapping: its ``reader``, its ``key`` when the scenario's key
    differs from the attribute's name, whether the key is ``required``, and ``doc``: what it means, for the
    scenario reference (docs/scenario-reference.md)."""

    reader: Reader
    key: str | None = None
    required: bool = False
    doc: str = ""


def spec_field(default: Any, reader: Reader, *, key: str | None = None, required: bool = False, doc: str = "") -> Any:
    """A frozen dataclass field whose scenario key is read by ``reader``; ``default`` is the typed default and
    ``doc`` what the key means (one line, for the scenario reference)."""
    return dataclasses.field(default=default, metadata={"spec": Declared(reader, key, required, doc)})


def declared(cls: type) -> dict[str, Declared]:
    """Attribute name -> its declaration, for every ``spec_field`` of the dataclass ``cls`` (bases first)."""
    return {f.name: f.metadata["spec"] for f in dataclasses.fields(cls) if "spec" in f.metadata}


def declared_keys(cls: type, leave_out: frozenset[str] = frozenset()) -> set[str]:
    """The scenario keys ``cls`` reads."""
    return {d.key or attr for attr, d in declared(cls).items()} - leave_out


def read_fields(
    cls: type, data: Mapping[str, Any], path: str, leave_out: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Check ``data``'s keys against ``cls``'s declared ones (less ``leave_out``) and read every key it has:
    attribute name -> typed value; absent keys keep the dataclass default."""
    decl = {attr: d for attr, d in declared(cls).items() if (d.key or attr) not in leave_out}
    required = {d.key or attr for attr, d in decl.items() if d.required}
    check_keys(data, {d.key or attr for attr, d in decl.items()}, path, required)
    out = {}
    for attr, d in decl.items():
        key = d.key or attr
        if key in data:
            out[attr] = d.reader(sub(path, key), data[key])
    return out
