"""Fuzzing the scenario validation, without root: scenario files generated around the shipped ones.

Each example takes a shipped scenario (its YAML as data, or as text) and mutates it: a value anywhere replaced by
a hostile one (null, zero, negative, huge, the wrong type, a bad unit) or by a value from elsewhere in the shipped
scenarios (often valid, so validation goes deeper), a key removed, an unknown key added, or the text itself cut,
spliced or given bytes that are not UTF-8. Validation (the loader, every sweep point, the
time bound and the CPU budget's estimate, as `testbed run` does them before building) must either accept the file
or refuse it with the project's own error in one line; anything else (a TypeError, a traceback, a hang) is a bug.
An accepted file must be within the machine's bounds: every job fits its duration, the fabric its node ceiling.
Examples are derandomized: the same 500 files in every run, so a failure reproduces.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis", reason="python3-hypothesis is not installed (./setup.sh installs it)")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from testbed.calibrate.model import FALLBACK  # noqa: E402
from testbed.errors import TestbedError  # noqa: E402
from testbed.plan import bounds  # noqa: E402
from testbed.plan.budget import check_budget  # noqa: E402
from testbed.spec.fabric import MAX_NODES  # noqa: E402
from testbed.spec.scenario import expand, load_scenario_file, resolve_paths  # noqa: E402
from testbed.spec.topology import Topology  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "scenarios").glob("*.yaml"))
BASES = [resolve_paths(yaml.safe_load(p.read_text()), p.parent) for p in SHIPPED]
TEXTS = [p.read_bytes() for p in SHIPPED]
EXAMPLES = 500  # per test


def _values(node: Any) -> list[Any]:
    """Every value in ``node`` (scalars and subtrees): what other scenarios put somewhere, to splice in elsewhere."""
    out: list[Any] = []
    items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for value in items:
        out.append(value)
        out.extend(_values(value))
    return out


SPLICE = [v for base in BASES for v in _values(base) if len(repr(v)) < 400]
HOSTILE = st.one_of(
    st.none(),
    st.sampled_from([0, -1, 1, 2**63, 1e18, -1e-9, math.inf, math.nan, True, "", "x", [], {}, [None], {"a": 1}]),
    st.sampled_from(["0", "-5Mbit", "100GB", "1e18", "0s", "-1ms", "10pkt", "0pkt", "1:0", "0:1", "3:1", "fat-tree"]),
    st.sampled_from(["all", "l1h1", "l9h9", "ring", "tree", "step", "ramp", "off", "bbr", "dctcp", "l1->l1h1"]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-3, 300), max_size=3),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in ``node`` (dict keys and list indexes), the root's children first."""
    out: list[tuple[Any, ...]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((*prefix, key))
        out.extend(_paths(value, (*prefix, key)))
    return out


def _parent(root: Any, path: tuple[Any, ...]) -> Any:
    node = root
    for key in path[:-1]:
        node = node[key]
    return node


@st.composite
def mutated_data(draw: st.DrawFn) -> Any:
    data = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, key = _parent(data, path), path[-1]
        action = draw(st.sampled_from(["splice", "splice", "replace", "replace", "delete", "add"]))
        if action == "splice":  # a value some shipped scenario has somewhere: often valid, so checks go deeper
            parent[key] = copy.deepcopy(draw(st.sampled_from(SPLICE)))
        elif action == "replace":
            parent[key] = draw(HOSTILE)
        elif action == "delete":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["colour", "rate", "k", "size", "spinez", 7, None]))] = draw(HOSTILE)
        else:
            parent.append(draw(HOSTILE))
    return data


@st.composite
def mutated_text(draw: st.DrawFn) -> bytes:
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 40))
        insert = draw(st.sampled_from([b"", b":", b"- ", b"\n", b"{", b"]", b"\t", b"\xe9", b"\xff\xfe", b"&a", b"*a"]))
        text = text[:at] + insert + text[at + cut :]
    return text


def validate(data: Any) -> None:
    """What `testbed run` checks before it builds anything, without the host's capabilities."""
    sf = expand(data) if isinstance(data, dict) else _from_text(data)
    for point in sf.points:
        topo = Topology(point.fabric)
        bounds.check_fabric_size(point.fabric)
        bounds.check_time(point.workload, topo, point.duration_s)
        check_budget(point, None, FALLBACK, env={})
        for job in point.workload:  # accepted: within the machine's bounds
            assert job.start_after + bounds.job_need(job, topo).total_s <= point.duration_s
        assert len(topo.nodes) == point.fabric.node_count <= MAX_NODES


def _from_text(text: bytes) -> Any:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".yaml") as fh:
        fh.write(text)
        fh.flush()
        return load_scenario_file(fh.name)


def _judge(data: Any) -> None:
    try:
        validate(data)
    except TestbedError as exc:
        message = str(exc)
        assert message.strip() and "\n" not in message, f"not one line: {message!r}"


COMMON = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _base(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASES[[p.stem for p in SHIPPED].index("default")])
    data.update(changes)
    return data


# What the fuzzing found, kept as fixed examples: each raised a TypeError, OverflowError or ValueError before
@COMMON
@given(mutated_data())
@example({**_base(), "fabric": {**_base()["fabric"], None: 1}})  # a null key: sorting the unknown keys
@example({**_base(), "fabric": {**_base()["fabric"], 7: 1, "colour": 2}})  # keys of mixed types
@example({**_base(), "fabric": {**_base()["fabric"], "oversubscription": math.nan}})  # Fraction(nan)
@example({**_base(), "fabric": {**_base()["fabric"], "host_link": {"rate": math.inf}}})  # int(inf)
@example({**_base(), "fabric": {**_base()["fabric"], "host_link": {"buffer": math.nan}}})  # int(nan)
@example({**_base(), "duration": "1e999s"})  # a string that parses to inf
@example({**_base(), "sweep": {None: [1, 2]}})  # a null sweep axis (`&a` as a key in YAML)
def test_mutated_scenarios_get_one_line_or_pass(data: Any) -> None:
    _judge(data)


@COMMON
@given(mutated_text())
@example(b"name: x\nfabric: {}\nsweep:\n  &a: [1, 2]\n")  # an anchor with no key: a null sweep axis
def test_mutated_scenario_text_gets_one_line_or_passes(text: bytes) -> None:
    _judge(text)


@pytest.mark.parametrize("index", range(len(BASES)), ids=[p.stem for p in SHIPPED])
def test_every_shipped_scenario_passes_validation(index: int) -> None:
    validate(BASES[index])
