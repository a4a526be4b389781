"""A sweep point's plan (``plan_point``): every decision about the point made once, before anything is built, and
handed to the builders. Whatever refuses the point refuses it here, as one ``SpecError`` line (exit 2): a missing
capability or a marking this machine cannot do (``testbed.fabric.checks.plan_fabric``), a guest it does not fit,
too many nodes or too long a workload (``bounds``), a kernel queue telemetry it cannot hold, a job this machine
cannot run (its generator's ``check``), too little CPU (``budget``). `run`, `cli`, the cluster's client and worker, and `validate` all plan every point before the first
one is built.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from testbed.errors import TestbedError
from testbed.fabric.checks import plan_fabric
from testbed.fabric.portplan import FabricPlan, PortPlan
from testbed.host.machine import Machine
from testbed.plan import bounds, guestfit
from testbed.plan import budget as pf_budget
from testbed.plan.flows import job_flows, resolve_ranks
from testbed.spec.fields import SpecError
from testbed.spec.scenario import Scenario, TelemetrySpec
from testbed.spec.topology import Topology
from testbed.telemetry.qtelem import DRAIN_S
from testbed.telemetry.qtelem import check_config as check_qtelem
from traffic.workload import make_generator


@dataclass(frozen=True)
class JobPlan:
    """One job: the hosts it runs on (its ranks resolved) and the flows it keeps busy (sender, receiver)."""

    name: str
    kind: str
    hosts: tuple[str, ...]
    flows: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class PointPlan:
    """A point as it will run here. ``scenario``: the point with its telemetry fitted to the machine (a software-
    emulated guest caps the sampler's rates; ``guest_fit`` says how, None when unchanged). ``fabric``: the topology,
    drawn once, and every port's decisions. ``budget``: the predicted CPU load against the budget (None when not
    judged: a cluster's client leaves it to the worker). ``jobs``: each job's hosts and flows; ``placement``: who
    picks the flows' source ports, and from which seed."""

    scenario: Scenario
    machine: Machine = field(repr=False)
    fabric: FabricPlan
    guest_fit: dict[str, Any] | None
    budget: pf_budget.BudgetVerdict | None
    jobs: tuple[JobPlan, ...]
    placement: dict[str, Any]

    @property
    def topo(self) -> Topology:
        return self.fabric.topo

    @property
    def ports(self) -> tuple[PortPlan, ...]:
        return self.fabric.ports

    @property
    def telemetry(self) -> TelemetrySpec:
        return self.scenario.telemetry

    def describe(self) -> dict[str, Any]:
        """What the manifest records under ``plan``: each port's decisions and each job's hosts and flows."""
        ports = [
            {
                "port": p.name,
                "tier": p.tier,
                "leaf": p.leaf,
                "marking": p.marking,
                **({"marker_classes": [c.name for c, _ in p.marker_classes]} if p.marker_classes else {}),
                "sampler_leaf": p.sampler_leaf,
                "pfc": p.pfc,
                "lb": p.lb,
            }
            for p in self.ports
        ]
        jobs = [
            {"name": j.name, "kind": j.kind, "hosts": list(j.hosts), "flows": [list(f) for f in j.flows]}
            for j in self.jobs
        ]
        return {"ports": ports, "jobs": jobs}


def plan_point(point: Scenario, machine: Machine, budget: bool = True) -> PointPlan:
    """The point's plan; a SpecError (exit 2) whatever refuses it (a missing capability, a guest it does not fit,
    too many nodes, too long a job, too little CPU).

    ``budget=False`` leaves out the CPU budget, which needs the machine's own calibration: a cluster client judges
    a worker by its capabilities, and the worker's own plan judges the budget."""
    caps, env = machine.caps, machine.env
    try:
        fabric = plan_fabric(point.fabric, caps, point.topology())  # the loader's address plan: drawn once
        topo = fabric.topo
        guestfit.check_fabric(point.fabric, env, topo)
        bounds.check_fabric_size(point.fabric)
        bounds.check_time(point.workload, topo, point.duration_s)
        if point.telemetry.bpf_queues:
            check_qtelem(point.telemetry.slot_ns, DRAIN_S, len(topo.ports()))
            if any(p.link.classes for p in topo.ports()):
                raise SpecError(
                    "telemetry.bpf_queues",
                    "the kernel queue telemetry counts one queue per port; ports with traffic classes have one per "
                    "class: use the poller (leave bpf_queues out), whose rows hold each port's total",
                )
        for i, job in enumerate(point.workload):  # what each job needs of this machine (tools, congestion controls)
            make_generator(job, i).check(caps)
        verdict = pf_budget.require_budget(point, caps, env=env, topo=topo) if budget else None
    except SpecError:
        raise
    except TestbedError as exc:
        where = ", ".join(f"{k}={v}" for k, v in point.variant)
        raise SpecError(f"sweep point {where}" if where else "", str(exc)) from exc
    telemetry, fit = guestfit.fit_telemetry(point.telemetry, env)
    link = float(point.fabric.host_link.rate_bps)
    jobs = tuple(
        JobPlan(
            job.name,
            job.kind,
            _hosts(job, topo),
            tuple((f.src, f.dst) for f in job_flows(job, topo, link)),
        )
        for job in point.workload
    )
    return PointPlan(
        dataclasses.replace(point, telemetry=telemetry),
        machine,
        fabric,
        fit,
        verdict,
        jobs,
        point.placement.manifest(point.seed, point.repeat_index),
    )


def _hosts(job: Any, topo: Topology) -> tuple[str, ...]:
    if getattr(job, "ranks", None) is not None:
        return tuple(resolve_ranks(job.ranks, topo))
    used = getattr(job, "hosts_used", None)
    return tuple(dict.fromkeys(used())) if callable(used) else ()
