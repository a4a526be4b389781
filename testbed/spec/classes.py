"""Traffic classes of an egress port (``classes:`` in a link spec or an override): DSCP -> a queue of its own.

Each class has a name, the DSCP values it takes, a scheduling kind and its own buffer and ECN marking:

- ``priority: N`` (1 highest .. 7): strict priority. A class is served only when every class of a higher
  priority has nothing to send.
- ``weight: W`` (1..100): a weighted share of what the strict classes leave. Backlogged weighted classes split it
  in the ratio of their weights.

A class may be ``lossless: {xoff: SIZE, xon: SIZE}`` (PFC-style; xon defaults to half of xoff; ``false``: off):
when a router's queue of the class holds more than XOFF, the ports upstream of the router that fed it pause the
class until the queue holds less than XON (testbed.pfc runs it; testbed.fabric.pfc checks the headroom).

Packets whose DSCP no class names go to the ``default: true`` class (or the class holding DSCP 0). The port holds
at most ``MAX_CLASSES`` (HTB's eight priorities, as 802.1p's eight traffic classes). The plan that HTB runs, which
is the classes' HTB priority and quantum, is computed here (``htb_plan``): testbed.fabric.tc writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from testbed.spec.fields import SpecError, boolean, check_keys, integer, name, sub, unit
from testbed.spec.units import Size, parse_size

MAX_CLASSES = 8
WEIGHTED_PRIO = 7  # HTB prio of every weighted class: after strict priorities 1..7 (HTB prio 0..6)
HTB_QUANTUM_MAX = 200_000  # HTB warns above it and serves such a class in bursts that long
CLASS_KEYS = {"name", "dscp", "priority", "weight", "buffer", "ecn", "default", "lossless"}
LOSSLESS_KEYS = {"xoff", "xon"}


@dataclass(frozen=True)
class Lossless:
    """PFC thresholds of a class: bytes held at a router per ingress port (pause above xoff, resume below xon)."""

    xoff: Size
    xon: Size


def parse_lossless(data: Any, path: str) -> Lossless:
    check_keys(data, LOSSLESS_KEYS, path, {"xoff"})
    xoff = unit(sub(path, "xoff"), parse_size, data["xoff"])
    xon = unit(sub(path, "xon"), parse_size, data["xon"]) if "xon" in data else Size(xoff.value // 2, xoff.unit)
    return Lossless(xoff, xon)


@dataclass(frozen=True)
class TrafficClass:
    """One class of a port. ``buffer``/``ecn`` None: the link's own (``LinkSpec.buffer``, ``LinkSpec.marking``)."""

    name: str
    dscp: tuple[int, ...]
    priority: int | None = None  # strict priority 1..7 (1 served first); None: weighted
    weight: int | None = None
    buffer: Size | None = None
    ecn: Any = None  # a testbed.spec.link.Marking, or None (the link's); Any: link.py imports this module
    default: bool = False
    lossless: Lossless | None = None  # PFC-style pause (testbed.pfc); None: the class drops when full

    @property
    def strict(self) -> bool:
        return self.priority is not None


def parse_classes(data: Any, path: str, marking_reader: Any) -> tuple[TrafficClass, ...]:
    """The ``classes:`` list; ``marking_reader(data, path)`` reads a class's ``ecn`` (testbed.spec.link.Marking)."""
    if not isinstance(data, Sequence) or isinstance(data, (str, bytes)):
        raise SpecError(path, f"expected a list of classes, got {type(data).__name__}")
    if not data:
        raise SpecError(path, "an empty list: leave classes out for one queue per port")
    if len(data) > MAX_CLASSES:
        raise SpecError(path, f"{len(data)} classes; a port holds at most {MAX_CLASSES} (HTB's priorities)")
    classes = tuple(_parse_class(item, f"{path}[{i}]", marking_reader) for i, item in enumerate(data))
    _check_set(classes, path)
    return classes


def _parse_class(data: Any, path: str, marking_reader: Any) -> TrafficClass:
    check_keys(data, CLASS_KEYS, path, {"name", "dscp"})
    cname = name(sub(path, "name"), data["name"])
    raw = data["dscp"]
    values = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    if not values:
        raise SpecError(sub(path, "dscp"), "names no DSCP value")
    dscp = tuple(integer(sub(path, "dscp"), v, 0, 63) for v in values)
    if ("priority" in data) == ("weight" in data):
        raise SpecError(path, "give exactly one of priority: 1..7 (strict) or weight: 1..100 (a weighted share)")
    priority = integer(sub(path, "priority"), data["priority"], 1, 7) if "priority" in data else None
    weight = integer(sub(path, "weight"), data["weight"], 1, 100) if "weight" in data else None
    buffer = unit(sub(path, "buffer"), parse_size, data["buffer"]) if "buffer" in data else None
    ecn = marking_reader(data["ecn"], sub(path, "ecn")) if "ecn" in data else None
    default = boolean(sub(path, "default"), data.get("default", False))
    raw_pfc = data.get("lossless", False)  # false: off (a sweep can turn it off)
    lossless = None if raw_pfc is False else parse_lossless(raw_pfc, sub(path, "lossless"))
    return TrafficClass(cname, dscp, priority, weight, buffer, ecn, default, lossless)


def _check_set(classes: tuple[TrafficClass, ...], path: str) -> None:
    seen: dict[int, str] = {}
    names: set[str] = set()
    for i, c in enumerate(classes):
        if c.name in names:
            raise SpecError(f"{path}[{i}].name", f"duplicate class name {c.name!r}")
        names.add(c.name)
        for d in c.dscp:
            if d in seen:
                raise SpecError(f"{path}[{i}].dscp", f"DSCP {d} is also in class {seen[d]!r}")
            seen[d] = c.name
    defaults = [i for i, c in enumerate(classes) if c.default]
    if len(defaults) > 1:
        raise SpecError(f"{path}[{defaults[1]}].default", "only one class can be the default")
    if not defaults and 0 not in seen:
        raise SpecError(path, "no class takes DSCP 0 or is default: true, so unmarked packets would have no queue")
    levels = [c.priority for c in classes if c.priority is not None]
    if len(set(levels)) != len(levels):
        i = next(i for i, c in enumerate(classes) if c.priority is not None and levels.count(c.priority) > 1)
        raise SpecError(f"{path}[{i}].priority", "two strict classes share a priority: give each its own level")


def default_class(classes: Sequence[TrafficClass]) -> int:
    """Index of the class that takes packets no class names."""
    for i, c in enumerate(classes):
        if c.default:
            return i
    return next(i for i, c in enumerate(classes) if 0 in c.dscp)


def check_weights(classes: Sequence[TrafficClass], frame: int, path: str) -> None:
    """Weights HTB can hold at this frame size: the smallest weight's quantum is one frame, so the largest ratio is
    ``HTB_QUANTUM_MAX / frame`` (22 at MTU 9000)."""
    weights = [c.weight for c in classes if c.weight is not None]
    if not weights:
        return
    most = HTB_QUANTUM_MAX // frame
    if max(weights) > most * min(weights):
        i = next(i for i, c in enumerate(classes) if c.weight == max(weights))
        raise SpecError(
            f"{path}[{i}].weight",
            f"weights {min(weights)}:{max(weights)} are further apart than the {most}:1 HTB can split with "
            f"{frame}-byte frames (quantum one frame to {HTB_QUANTUM_MAX} bytes)",
        )


@dataclass(frozen=True)
class HtbClass:
    """One class as HTB runs it: its minor (classid 1:<minor>; its leaf qdisc's handle is <minor>:), prio and
    quantum."""

    minor: int
    prio: int
    quantum: int


def htb_plan(classes: Sequence[TrafficClass], frame: int) -> list[HtbClass]:
    """HTB's view of the classes: all borrow the port's whole rate from class 1:1, so strict order is HTB's prio
    when lending and weighted shares are its deficit round robin by quantum (the smallest weight one frame)."""
    weights = [c.weight for c in classes if c.weight is not None]
    low = min(weights) if weights else 1
    plan = []
    for i, c in enumerate(classes):
        prio = c.priority - 1 if c.priority is not None else WEIGHTED_PRIO
        quantum = frame * (c.weight or low) // low
        plan.append(HtbClass(minor=0x11 + i, prio=prio, quantum=quantum))
    return plan
