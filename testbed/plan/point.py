"""A scenario point refused before anything is built, whatever the reason, as one ``SpecError`` line (exit 2):
a missing capability (``testbed.fabric.checks.check_spec``), a guest it does not fit, too many nodes or too long a
workload (``bounds``), a kernel queue telemetry it cannot hold, too little CPU (``budget``). `run`, `cli`, the
cluster's client and worker, and `validate` all call ``preflight``."""

from __future__ import annotations

from testbed.errors import TestbedError
from testbed.fabric.checks import check_spec
from testbed.host.capabilities import Capabilities
from testbed.plan import bounds, guestfit
from testbed.plan import budget as pf_budget
from testbed.spec.fields import SpecError
from testbed.spec.scenario import Scenario
from testbed.telemetry.qtelem import DRAIN_S
from testbed.telemetry.qtelem import check_config as check_qtelem


def preflight(point: Scenario, caps: Capabilities, budget: bool = True) -> None:
    """Refuse a point this machine cannot run, before anything is built: a SpecError (exit 2) whatever the reason
    (a missing capability, a guest it does not fit, too many nodes, too long a job, too little CPU).

    ``budget=False`` leaves out the CPU budget, which needs the machine's own calibration: a cluster client judges
    a worker by its capabilities, and the worker's own preflight judges the budget."""
    try:
        topo = check_spec(point.fabric, caps)
        guestfit.check_fabric(point.fabric)
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
        if budget:
            pf_budget.require_budget(point, caps)
    except SpecError:
        raise
    except TestbedError as exc:
        where = ", ".join(f"{k}={v}" for k, v in point.variant)
        raise SpecError(f"sweep point {where}" if where else "", str(exc)) from exc
