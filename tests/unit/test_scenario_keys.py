"""The declared default, bounds and choices of every scenario key (testbed.spec.keys; the jobs' and placement's
``spec_field``s) against the parsers, which judge a value: a declaration that drifts from its parser fails here.

- default: a scenario without the key resolves to the same spec as one with the key set to its declared default.
  A default that is described rather than written (``the tier's``, ``xoff / 2``, ...) has its own small rule below.
- bounds: lo and hi are accepted (lo refused when it is open), a value just outside either is refused at the key.
- choices: each is accepted, and a value outside them refused at the key.

Each key is tried inside a minimal valid scenario around it (``CONTEXT``: what its section needs besides it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from testbed.spec import reference
from testbed.spec.events import parse_event
from testbed.spec.fabric import FabricSpec
from testbed.spec.fields import SpecError
from testbed.spec.keys import SECTIONS, Key
from testbed.spec.link import EcmpSpec, LinkSpec, Marking, TransportSpec
from testbed.spec.placement import PlacementSpec
from testbed.spec.scaling import STACK_LATENCY_S, apply_scale
from testbed.spec.scenario import TelemetrySpec, build_scenario
from testbed.spec.topology import Topology
from testbed.spec.workload import SPEC_OF

MISSING = object()
TOPO = Topology(FabricSpec())
SCALED_LINK = {"rate": "400Gbit", "buffer": "32MB"}


def _override(data: dict[str, Any], parent: dict[str, Any]) -> LinkSpec:
    """The port l1 -> l1h1 under one override of link l1-l1h1; host_link is ``parent`` (with the override's mtu:
    every link shares one)."""
    host = dict(parent)
    if isinstance(data.get("mtu"), int):
        host["mtu"] = data["mtu"]
    fab = FabricSpec.from_dict({"host_link": host, "overrides": [{"link": "l1-l1h1", **data}]})
    return fab.link_for("l1", "l1h1", fab.host_link)


# section -> (its mapping, the mapping one level up) -> the resolved spec
PARSE: dict[str, Callable[[dict[str, Any], dict[str, Any]], Any]] = {
    "scenario": lambda d, p: build_scenario({"name": "x", "fabric": {}, **d}),
    "telemetry": lambda d, p: TelemetrySpec.from_dict(d, "telemetry"),
    "fabric": lambda d, p: FabricSpec.from_dict({"host_link": p, **d}),
    "link": lambda d, p: LinkSpec.from_dict(d, "host_link"),
    "override": _override,
    "ecn": lambda d, p: Marking.from_dict(d, "ecn"),
    "class": lambda d, p: LinkSpec.from_dict({**p, "classes": [d]}, "host_link"),
    "lossless": lambda d, p: LinkSpec.from_dict(
        {"classes": [{"name": "a", "dscp": 0, "priority": 1, "lossless": d}]}, "host_link"
    ),
    "ecmp": lambda d, p: EcmpSpec.from_dict(d, "ecmp"),
    "transport": lambda d, p: TransportSpec.from_dict(d, "transport"),
    "scale": lambda d, p: apply_scale({"scale": d, "host_link": SCALED_LINK}),
    "event": lambda d, p: parse_event(d, "events[0]", TOPO),
}
# What a section's mapping holds besides the key under test (the key itself is taken out first).
BASE: dict[str, dict[str, Any]] = {
    "override": {"rate": "20Mbit", "loss": 0.02},  # an override sets at least one key
    "ecn": {"mode": "step", "k": "30KB"},
    "class": {"name": "a", "dscp": 0, "priority": 1},
    "lossless": {"xoff": "20000B"},
    "scale": {"factor": 4000},
    "event": {"at": "1s", "action": "down", "link": "s1-l1"},
}
RAMP = {"mode": "ramp", "kmin": "10KB", "kmax": "30KB", "pmax": 0.5}
FLAP = {**BASE["event"], "action": "flap"}
DEGRADE = {**BASE["event"], "action": "degrade"}
MTU_EVENT = {**BASE["event"], "action": "mtu", "end": "l1", "mtu": 1500}
# Keys that need more around them than their section's BASE; a function of the value where that decides.
CONTEXT: dict[tuple[str, str], dict[str, Any] | Callable[[Any], dict[str, Any]]] = {
    ("telemetry", "link_hz"): {"queue_hz": 20000},  # link_hz is at most queue_hz
    ("fabric", "k"): {"topology": "fat-tree"},
    ("fabric", "hosts_per_leaf"): {"leaves": 1},  # at most 1000 nodes in all
    ("ecn", "mode"): lambda v: RAMP if v == "ramp" else {"k": "30KB"} if v == "step" else {},
    ("ecn", "pmax"): RAMP,
    ("class", "dscp"): {"name": "a", "priority": 1, "default": True},  # a class without DSCP 0 is the default
    ("class", "weight"): {"name": "a", "dscp": 0},
    ("class", "priority"): {"name": "a", "dscp": 0},
    ("ecmp", "pick"): {"mode": "spray"},
    ("ecmp", "gap"): {"mode": "flowlet"},
    ("scale", "buffers"): {"factor": 4000, "rtt": "12us"},
    ("event", "count"): FLAP,
    ("event", "period"): FLAP,
    ("event", "loss"): DEGRADE,
    ("event", "rate"): DEGRADE,
    ("event", "mtu"): MTU_EVENT,
    ("event", "end"): MTU_EVENT,
    ("event", "action"): lambda v: {**BASE["event"], **({"degrade": {"loss": 0.01}, "mtu": MTU_EVENT}.get(v, {}))},
}


def resolve(section: str, key: str, value: Any = MISSING, parent: dict[str, Any] | None = None) -> Any:
    """The spec a minimal scenario resolves to with ``key`` set to ``value`` (left out: MISSING)."""
    ctx = CONTEXT.get((section, key), BASE.get(section, {}))
    data = dict(ctx(value) if callable(ctx) else ctx)
    data.pop(key, None)
    if value is not MISSING:
        data[key] = value
    return PARSE[section](data, parent or {})


def keys_where(pred: Callable[[Key], bool]) -> list[Any]:
    return [pytest.param(s, k, id=f"{s}.{k.key}") for s, keys in SECTIONS.items() for k in keys if pred(k)]


# --- defaults ------------------------------------------------------------------------------------------------------

# A parent's value, as a scenario writes it: a default of "the tier's" or "the link's" is tried with the parent set
# to it (none of these is the parent's own default, so that the comparison could fail).
INHERITED_TEXT = ("the tier's", "the link's", "host_link's")
PARENT_VALUE: dict[str, Any] = {
    "rate": "50Mbit",
    "buffer": "100000B",
    "mtu": 1500,
    "loss": 0.01,
    "delay": "1ms",
    "ecn": {"mode": "step", "k": "30000B"},
    "classes": [{"name": "a", "dscp": 0, "priority": 1}],
}
# Described defaults with a rule of their own (each tested below).
DESCRIBED = {
    ("telemetry", "link_hz"): "100 (at most queue_hz)",
    ("lossless", "xon"): "xoff / 2",
    ("ecmp", "gap"): "the fabric's",
    ("scale", "emulated_rtt"): "an estimate",
    ("scale", "buffers"): "keep (bdp with rtt)",
}


def _literal(k: Key) -> bool:
    return bool(k.default) and k.default not in INHERITED_TEXT and not k.type.startswith("section:")


@pytest.mark.parametrize(("section", "k"), keys_where(_literal))
def test_a_literal_default_resolves_as_the_key_left_out(section: str, k: Key) -> None:
    if (section, k.key) in DESCRIBED:
        assert k.default == DESCRIBED[(section, k.key)], "a described default changed: revisit its rule below"
        return
    assert resolve(section, k.key) == resolve(section, k.key, yaml.safe_load(k.default))


def test_a_section_default_is_described_or_off() -> None:
    """A mapping's default (fabric_link's "host_link's", a link's ecn "off") is one of the rules here."""
    for section, keys in SECTIONS.items():
        for k in keys:
            if k.type.startswith("section:") and k.default:
                assert k.default in (*INHERITED_TEXT, "off", "false"), (section, k.key, k.default)
                if k.default in ("off", "false"):
                    assert resolve(section, k.key) == resolve(section, k.key, yaml.safe_load(k.default))


@pytest.mark.parametrize(("section", "k"), keys_where(lambda k: k.default in INHERITED_TEXT))
def test_an_inherited_default_is_the_parents_value(section: str, k: Key) -> None:
    if (section, k.key) == ("fabric", "fabric_link"):  # inherits every key host_link sets
        value = {"rate": "50Mbit", "buffer": "100000B", "delay": "1ms"}
        parent = value
    else:
        value = PARENT_VALUE[k.key]
        parent = {k.key: value}

    def view(spec: Any) -> Any:  # a class's queue as the port runs it: the link's buffer and marking where unset
        return spec.class_link(spec.classes[0]) if section == "class" else spec

    inherited = view(resolve(section, k.key, MISSING, parent))
    assert inherited == view(resolve(section, k.key, value, parent))
    assert inherited != view(resolve(section, k.key, MISSING, {})), "the parent's value is the default anyway"


def test_link_hz_defaults_to_100_at_most_queue_hz() -> None:
    declared = float(DESCRIBED[("telemetry", "link_hz")].split()[0])
    for queue_hz in (20000, 1000, declared, 50, 1):
        left_out = TelemetrySpec.from_dict({"queue_hz": queue_hz}, "t")
        assert left_out == TelemetrySpec.from_dict({"queue_hz": queue_hz, "link_hz": min(declared, queue_hz)}, "t")


@pytest.mark.parametrize("xoff", ["20000B", "21pkt"])
def test_xon_defaults_to_half_of_xoff(xoff: str) -> None:
    n, unit = int(xoff.rstrip("Bpkt")), xoff.lstrip("0123456789")
    left_out = PARSE["lossless"]({"xoff": xoff}, {})
    assert left_out == PARSE["lossless"]({"xoff": xoff, "xon": f"{n // 2}{unit}"}, {})
    assert left_out != PARSE["lossless"]({"xoff": xoff, "xon": f"{n // 2 + 1}{unit}"}, {})


def test_an_ecmp_gap_left_out_is_the_fabrics() -> None:
    flowlet = {"ecmp": {"mode": "flowlet"}}
    gap = Topology(FabricSpec.from_dict(flowlet)).flowlet_gap()
    assert gap > 0
    given = Topology(FabricSpec.from_dict({"ecmp": {"mode": "flowlet", "gap": f"{gap!r}s"}}))
    assert given.flowlet_gap() == pytest.approx(gap)


def test_scale_buffers_default_to_keep_and_to_bdp_with_an_rtt() -> None:
    scale = PARSE["scale"]
    assert scale({"factor": 4000}, {}) == scale({"factor": 4000, "buffers": "keep"}, {})
    with_rtt = {"factor": 4000, "rtt": "12us"}
    assert (
        scale(with_rtt, {}) == scale({**with_rtt, "buffers": "bdp"}, {}) != scale({**with_rtt, "buffers": "keep"}, {})
    )


def test_emulated_rtt_defaults_to_the_estimate_from_the_emulated_rate() -> None:
    """The estimate: one frame's serialisation at the emulated rate plus the stack's latency, per hop (4 in a
    spine-leaf) both ways."""
    sc = {"factor": 4000, "rtt": "12us", "buffers": "bdp"}
    estimate = 2 * 4 * ((9000 + 14) * 8 / 100e6 + STACK_LATENCY_S)
    left_out, _ = PARSE["scale"](sc, {})
    assert left_out == PARSE["scale"]({**sc, "emulated_rtt": f"{estimate * 1e6!r}us"}, {})[0]
    assert left_out != PARSE["scale"]({**sc, "emulated_rtt": f"{2 * estimate * 1e6!r}us"}, {})[0]


def _job_fields() -> list[Any]:
    """(field, its declaration) of every job and placement field with a default the reference states."""
    out = []
    classes: list[type[Any]] = [*dict.fromkeys(SPEC_OF.values()), PlacementSpec]
    for cls in classes:
        for fl in dataclasses.fields(cls):
            d = fl.metadata.get("spec")
            if d is not None and reference._declared_key(fl, d).default:
                out.append(pytest.param(fl, d, id=f"{cls.__name__}.{fl.name}"))
    return out


@pytest.mark.parametrize(("fl", "d"), _job_fields())
def test_a_job_keys_stated_default_reads_back_as_its_fields_default(fl: dataclasses.Field[Any], d: Any) -> None:
    """A job's default comes from its field; the reference writes it as text, which its reader reads back."""
    text = reference._declared_key(fl, d).default
    assert d.reader("job", yaml.safe_load(text)) == fl.default


# --- bounds and choices --------------------------------------------------------------------------------------------


def _refused_at(section: str, key: str, value: Any) -> None:
    with pytest.raises(SpecError) as err:
        resolve(section, key, value)
    assert err.value.path.rsplit(".", 1)[-1] == key, str(err.value)


def _outside(k: Key, bound: float, direction: float) -> float:
    return bound + direction if k.type == "integer" else math.nextafter(bound, direction * math.inf)


@pytest.mark.parametrize(("section", "k"), keys_where(lambda k: k.lo is not None or k.hi is not None))
def test_the_declared_bounds_are_the_parsers(section: str, k: Key) -> None:
    assert k.type in ("integer", "number"), "bounds of an integer or a number"
    as_type = int if k.type == "integer" else float
    if k.lo is not None:
        if k.lo_open:
            _refused_at(section, k.key, as_type(k.lo))
            resolve(section, k.key, _outside(k, k.lo, +1))
        else:
            resolve(section, k.key, as_type(k.lo))
            _refused_at(section, k.key, as_type(_outside(k, k.lo, -1)))
    if k.hi is not None:
        resolve(section, k.key, as_type(k.hi))
        _refused_at(section, k.key, as_type(_outside(k, k.hi, +1)))


@pytest.mark.parametrize(("section", "k"), keys_where(lambda k: bool(k.choices)))
def test_the_declared_choices_are_the_parsers(section: str, k: Key) -> None:
    for value in k.choices:
        resolve(section, k.key, value)
    _refused_at(section, k.key, "no-such-choice")
