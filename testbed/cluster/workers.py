"""Which cluster workers may run a point: what each told the client about itself, judged by the preflight."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from testbed.errors import TestbedError
from testbed.host.capabilities import Capabilities
from testbed.host.machine import Machine
from testbed.plan.point import plan_point
from testbed.spec.fields import SpecError
from testbed.spec.scenario import Scenario

from .task import METRIC


class ClusterError(TestbedError, RuntimeError):
    """The cluster cannot be reached, or has no worker."""


@dataclass(frozen=True)
class WorkerView:
    """A worker as the client sees it: its address, the host part of it, and what it told about itself."""

    address: str
    host: str
    name: str
    revision: str | None
    capabilities: Mapping[str, Any]
    calibration: Mapping[str, Any] | None

    @classmethod
    def from_info(cls, address: str, identity: Mapping[str, Any]) -> WorkerView | None:
        text = (identity.get("metrics") or {}).get(METRIC)
        if not isinstance(text, str):
            return None  # a plain Dask worker, not started by `testbed worker`: it gets no points
        info = json.loads(text)
        return cls(
            address,
            str(identity.get("host") or address),
            str(info.get("host")),
            info.get("revision"),
            info.get("capabilities") or {},
            info.get("calibration"),
        )


def refusal(point: Scenario, capabilities: Mapping[str, Any]) -> str | None:
    """Why a worker with these capabilities cannot run ``point`` (None: it can): the point's plan on them. The CPU
    budget is the worker's own plan's to judge, with its calibration."""
    caps = Capabilities.from_dict(capabilities)
    try:
        plan_point(point, Machine(caps), budget=False)  # the jobs' own needs too
    except (SpecError, TestbedError) as exc:
        return str(exc)
    return None


def placement(point: Scenario, workers: Mapping[str, WorkerView]) -> tuple[list[str], dict[str, str]]:
    """The hosts whose workers can run ``point`` (Dask restrictions by host: a restarted worker keeps its points),
    and why each other worker cannot."""
    hosts: set[str] = set()
    refused: dict[str, str] = {}
    for view in workers.values():
        why = refusal(point, view.capabilities)
        if why is None:
            hosts.add(view.host)
        else:
            refused[f"{view.name} ({view.address})"] = why
    return sorted(hosts), refused
