"""A sweep point's plan (testbed.plan.point.plan_point), without root: the topology drawn once per point from
loading its file to its plan, every port's marking decided as the records say it was, and a refusal as one
SpecError."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from testbed.host.capabilities import NEEDS, Capabilities
from testbed.host.machine import Machine
from testbed.host.trials import QDISC_TRIALS
from testbed.plan.point import plan_point
from testbed.spec.fields import SpecError
from testbed.spec.scenario import expand, load_scenario_file
from testbed.spec.topology import Topology

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))


def caps(**ecn: Any) -> Capabilities:
    """Every capability present; ``ecn`` overrides the marking's (sch_red and the eBPF marker both by default)."""
    d: dict[str, Any] = {n.key: True for n in NEEDS}
    d["netns"] = True
    d["ecn"] = {"sch_red": True, "bpf_marker": True, "marking_auto": "kernel", "dctcp": "kernel", **ecn}
    return dataclasses.replace(Capabilities.from_dict(d), qdiscs={q: True for q in (*QDISC_TRIALS, "tbf")})


@pytest.fixture
def topologies(monkeypatch: pytest.MonkeyPatch) -> list[Topology]:
    """Every Topology constructed while the test runs (the class itself is wrapped: every import sees it)."""
    made: list[Topology] = []
    init = Topology.__init__

    def counted(self: Topology, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Topology, "__init__", counted)
    return made


def _distinct(specs: list[Any]) -> list[Any]:
    """Equal specs once (a fabric spec need not hash: an override's values may be mappings)."""
    return [s for i, s in enumerate(specs) if s not in specs[:i]]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_point_draws_its_topology_once_from_its_file_to_its_plan(
    path: Path, topologies: list[Topology]
) -> None:
    """From reading the file to each point's plan, one topology per point: the loader draws it (points whose fabric
    specs are equal share it) and the plan takes it. The only other is the file's own fabric, checked before its
    sweep, when no point keeps it."""
    sf = load_scenario_file(path)
    for point in sf.points:
        before = len(topologies)
        try:
            plan = plan_point(point, Machine(caps()), budget=False)
        except SpecError:  # refused here (e.g. the memory its nodes need): planned on the loader's all the same
            assert len(topologies) == before
            continue
        assert len(topologies) == before and plan.topo is point.topo
        assert [p.name for p in plan.ports] == [p.name for p in plan.topo.ports()]
    points = {id(p.topo) for p in sf.points}
    assert len(points) == len(_distinct([p.fabric for p in sf.points]))
    assert len(_distinct([t.spec for t in topologies])) == len(topologies)  # no fabric spec drawn twice
    assert {id(t) for t in topologies} == points | {id(sf.base.topo)}


def test_a_sweep_draws_one_topology_per_distinct_fabric(topologies: list[Topology]) -> None:
    """Two buffers times two durations times two repetitions: eight points on two fabrics, so two topologies from
    loading to the last plan (the file's own buffer is one of the two)."""
    data = {**SMALL_ECN, "repeat": 2, "sweep": {"fabric.host_link.buffer": ["50KB", "100KB"], "duration": ["5s", "6s"]}}
    sf = expand(data)
    plans = [plan_point(point, Machine(caps()), budget=False) for point in sf.points]
    assert len(plans) == 8 and len(topologies) == 2
    assert [p.topo.spec for p in plans] == [p.fabric for p in sf.points]
    assert plans[0].topo is plans[2].topo is plans[3].topo and plans[0].topo is not plans[4].topo
    # a point whose fabric is replaced after loading gets its own fabric's plan, not the loader's
    other = dataclasses.replace(sf.points[0], fabric=sf.points[4].fabric)
    assert other.topology().spec == sf.points[4].fabric and len(topologies) == 3


def test_the_fixture_records_points_plan_their_recorded_marking(
    records: list[Path], topologies: list[Topology]
) -> None:
    """Each stored record's point, planned on the capabilities it recorded: one topology, and the marking and the
    placement the record holds."""
    assert len(records) == 15
    for rec in records:
        m = json.loads((rec / "manifest.json").read_text())
        machine = Machine(Capabilities.from_dict(m["capabilities"]))
        topologies.clear()
        (point,) = expand(m["scenario_file"]).points
        plan = plan_point(point, machine, budget=False)
        assert topologies == [plan.topo], rec.name
        assert plan.fabric.marking() == {k: v for k, v in m["marking"].items() if k != "cc"}, rec.name
        assert plan.placement == m.get("placement", plan.placement), rec.name  # older records have none


SMALL_ECN = {
    "name": "small-ecn",
    "fabric": {
        "spines": 1,
        "leaves": 2,
        "hosts_per_leaf": 1,
        "host_link": {"rate": "10Mbit", "buffer": "100KB", "ecn": {"mode": "step", "k": "30KB"}},
        "fabric_link": {"rate": "20Mbit", "buffer": "100KB", "ecn": "off"},
    },
    "workload": [{"kind": "iperf", "name": "a", "src": "l1h1", "dst": "l2h1", "duration": 1}],
    "duration": "5s",
}
HOST_PORTS = ["l1->l1h1", "l1h1->l1", "l2->l2h1", "l2h1->l2"]


def _plan(data: dict[str, Any], c: Capabilities) -> Any:
    (point,) = expand(data).points
    return plan_point(point, Machine(c), budget=False)


def test_ecn_ports_marked_by_the_kernel_where_it_has_red_else_by_the_marker() -> None:
    plan = _plan(SMALL_ECN, caps())
    by = {p.name: p for p in plan.ports}
    assert sorted(n for n, p in by.items() if p.marked) == sorted(HOST_PORTS)
    assert {by[n].leaf for n in HOST_PORTS} == {"red"} and {by[n].tier for n in HOST_PORTS} == {"host"}
    fabric = [p for n, p in by.items() if n not in HOST_PORTS]
    assert len(fabric) == 4 and all(p.marking == "off" and p.leaf == "bfifo" and p.tier == "fabric" for p in fabric)
    assert plan.fabric.marking() == {"ports": dict.fromkeys(HOST_PORTS, "kernel"), "impls": ["kernel"]}
    assert all(p.sampler_leaf == "10:" and p.pfc == "none" for p in plan.ports)
    # one spine: no port has an equal-cost sibling
    assert {p.lb for p in plan.ports} == {"single path"}

    no_red = _plan(SMALL_ECN, caps(sch_red=False, marking_auto="bpf"))
    assert no_red.fabric.marking() == {"ports": dict.fromkeys(HOST_PORTS, "bpf"), "impls": ["bpf"]}
    assert {no_red.fabric.port(n).leaf for n in HOST_PORTS} == {"bfifo"}  # the marker reads a drop-tail queue


def test_a_lossless_class_is_marked_by_the_marker_and_its_ports_take_pfc_roles() -> None:
    data = json.loads(json.dumps(SMALL_ECN))
    data["fabric"]["spines"] = 2
    data["fabric"]["fabric_link"] = {"rate": "20Mbit"}  # the host link's buffer and classes
    data["fabric"]["host_link"] = {
        "rate": "10Mbit",
        "buffer": "300KB",
        "mtu": 9000,
        "classes": [
            {"name": "rdma", "dscp": [26], "weight": 1, "lossless": {"xoff": "90KB", "xon": "60KB"},
             "ecn": {"mode": "step", "k": "30KB"}},
            {"name": "be", "dscp": [0], "weight": 1},
        ],
    }  # fmt: skip
    plan = _plan(data, caps())
    down = plan.fabric.port("l1->l1h1")  # the leaf's queue towards its host: the router's lossless queue
    assert down.leaf == "htb classes" and down.sampler_leaf == "1:" and down.marking == "bpf"
    assert down.class_marking == (("rdma", "bpf"), ("be", "off"))
    assert [c.name for c, _ in down.marker_classes] == ["rdma"] and "watched" in down.pfc
    assert plan.fabric.port("l1h1->l1").pfc == "paused"  # the host pauses for its leaf's queues
    assert plan.fabric.port("l1->s1").lb == "static" and plan.fabric.port("l1->l1h1").lb == "single path"
    assert plan.fabric.pfc.queues


def test_a_marking_this_machine_cannot_do_is_refused_as_one_spec_error() -> None:
    data = json.loads(json.dumps(SMALL_ECN))
    data["fabric"]["host_link"]["ecn"]["impl"] = "kernel"
    with pytest.raises(SpecError, match=r"ecn impl 'kernel' needs sch_red"):
        _plan(data, caps(sch_red=False, sch_red_reason="no sch_red"))


def test_the_guest_fit_comes_from_the_machine_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTBED_GUEST", "1")
    monkeypatch.setenv("TESTBED_GUEST_ACCEL", "tcg")
    data = json.loads(json.dumps(SMALL_ECN))
    data["telemetry"] = {"queue_hz": 100, "link_hz": 100}
    assert _plan(data, caps()).guest_fit is None  # this process's environment is not read
    (point,) = expand(data).points
    tcg = Machine(caps(), guest={"TESTBED_GUEST": "1", "TESTBED_GUEST_ACCEL": "tcg"})
    plan = plan_point(point, tcg, budget=False)
    assert plan.guest_fit is not None and plan.telemetry.queue_hz < 100


def test_the_machine_keeps_only_the_context_it_was_given() -> None:
    env = {"TESTBED_GUEST": "1", "TESTBED_GUEST_ACCEL": "kvm", "TESTBED_CPU_BUDGET": "75%", "HOME": "/root"}
    m = Machine.from_env(caps(), env)
    assert m.in_guest and m.guest == {"TESTBED_GUEST": "1", "TESTBED_GUEST_ACCEL": "kvm"} and m.cpu_budget == "75%"
    assert m.env == {k: v for k, v in env.items() if k != "HOME"}
    assert not Machine(caps()).in_guest and Machine(caps()).env == {}
    (point,) = expand(SMALL_ECN).points
    verdict = plan_point(point, m).budget
    assert verdict is not None and verdict.budget == pytest.approx(0.75)  # the user's budget, from the machine


def test_the_manifest_plan_lists_every_port_and_job() -> None:
    plan = _plan(SMALL_ECN, caps())
    d = json.loads(json.dumps(plan.describe()))
    assert [p["port"] for p in d["ports"]] == [p.name for p in plan.topo.ports()]
    assert {p["port"]: p["marking"] for p in d["ports"] if p["marking"] != "off"} == dict.fromkeys(HOST_PORTS, "kernel")
    assert d["jobs"] == [{"name": "a", "kind": "iperf", "hosts": ["l1h1", "l2h1"], "flows": [["l1h1", "l2h1"]]}]


def test_a_job_this_machine_cannot_run_is_refused_by_the_plan() -> None:
    data = json.loads(json.dumps(SMALL_ECN))
    data["workload"][0]["cc"] = "bbr"
    no_bbr = dataclasses.replace(caps(), cc={"cubic": True, "bbr": False})
    with pytest.raises(SpecError, match=r"job a: congestion control bbr is not available"):
        _plan(data, no_bbr)
    assert _plan(data, dataclasses.replace(caps(), cc={"cubic": True, "bbr": True})).jobs[0].name == "a"
