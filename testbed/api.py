"""The testbed from Python (a notebook, a script): build a scenario's fabric, run its jobs, read the records back as
pandas DataFrames. docs/api.md documents every name with examples.

    from testbed import api

    scenario = api.load_scenario("scenarios/default.yaml")
    with api.make_fabric(scenario) as fab:  # root: namespaces, links, qdiscs; torn down on leaving
        run = api.run_jobs(fab, scenario)
    run.table("queues")  # one record's table, a DataFrame

    sweep = api.load_sweep("runs/buffer")  # no root: one row per run, a column per swept key
    api.sweep_table(sweep, "fabric.host_link.buffer", ["goodput_bps"])

Reading records needs neither root nor the emulation's modules: those are imported when a fabric is made or a
scenario run, so that ``import testbed.api`` works wherever the record readers do.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from results.record import Run, load_run
from results.sweep import load_sweep, sweep_table
from testbed.errors import TestbedError
from testbed.spec.fields import SpecError
from testbed.spec.scenario import Scenario, ScenarioFile, expand, load_scenario, load_scenario_file

if TYPE_CHECKING:
    from testbed.fabric.build import Fabric

__all__ = [
    "Run",
    "RunFailedError",
    "Scenario",
    "ScenarioFile",
    "load_run",
    "load_scenario",
    "load_scenario_file",
    "load_sweep",
    "make_fabric",
    "run_jobs",
    "run_sweep",
    "sweep_table",
]


class RunFailedError(TestbedError, RuntimeError):
    """A run ended without measuring (its record says why, and stays on disk: ``path``)."""

    def __init__(self, path: Path, error: str | None):
        super().__init__(f"{path}: the run failed: {error or 'no error recorded'}")
        self.path = path


def _scenario(source: Scenario | str | Path | dict[str, Any]) -> Scenario:
    return source if isinstance(source, Scenario) else load_scenario(source)


def make_fabric(scenario: Scenario | str | Path | dict[str, Any], lock_wait: float = 0.0) -> Fabric:
    """The fabric of ``scenario`` (a Scenario, a scenario file or a dict), not yet built. ``with`` builds it and
    always tears it down; before that, the run's own checks refuse what this machine cannot run (capabilities,
    the CPU budget, the bounds) as a SpecError. ``lock_wait``: seconds to wait for another run's lock. Root."""
    from testbed.fabric.build import Fabric
    from testbed.invocation import enter
    from testbed.machine import here
    from testbed.plan.point import plan_point
    from testbed.run import job_ccs

    point = _scenario(scenario)
    enter(os.environ)  # the caller's environment, read here: where the run lock and state files are
    machine = here(os.environ)
    plan = plan_point(point, machine)
    return Fabric(
        point.fabric,
        machine.caps,
        lock_wait=lock_wait,
        extra_cc=job_ccs(point.workload),
        path_bytes=point.telemetry.path_bytes,
        plan=plan.fabric,
    )


def run_jobs(
    fab: Fabric, scenario: Scenario | str | Path | dict[str, Any], jobs: Sequence[str] = (), out: str | Path = "runs"
) -> Run:
    """Run the scenario's workload (or only the jobs named in ``jobs``) on ``fab``, built from the same scenario,
    and return its record under ``out``, as ``testbed run`` records a point (telemetry, fidelity, summary). The
    fabric stays up for the next call. A run that failed raises RunFailedError naming its record. Root."""
    from testbed.machine import with_caps
    from testbed.run import run_on_built

    point = _scenario(scenario)
    if jobs:
        named = {getattr(j, "name", ""): j for j in point.workload}
        unknown = [j for j in jobs if j not in named]
        if unknown:
            raise SpecError("workload", f"no job {', '.join(unknown)} in {point.name}: jobs are {', '.join(named)}")
        point = dataclasses.replace(point, workload=tuple(named[j] for j in jobs))
    result = run_on_built(fab, point, Path(out), with_caps(fab.caps, os.environ))
    if result.status != "complete":
        raise RunFailedError(result.path, result.error)
    return load_run(result.path)


def run_sweep(
    scenario: str | Path | dict[str, Any], out: str | Path = "runs", lock_wait: float = 0.0, retake_unfaithful: int = 0
) -> pd.DataFrame:
    """Run every point of a scenario's sweep, each on a fabric of its own, as ``testbed run`` does (every point is
    checked before the first is built), and return ``load_sweep`` of the records written. A failed point keeps its
    row, with its ``status``. Root; a stock-kernel scenario runs in a guest, which only ``testbed run`` starts."""
    from testbed.invocation import enter
    from testbed.machine import here
    from testbed.run import run_file

    enter(os.environ)  # the caller's environment, read here: where the run lock and state files are
    sf = expand(scenario) if isinstance(scenario, dict) else load_scenario_file(scenario)
    if sf.base.kernel != "native":
        raise SpecError("kernel", f"{sf.base.kernel}: a guest kernel's scenario runs with `testbed run`, not here")
    results = run_file(
        sf, Path(out), lock_wait=lock_wait, retake_unfaithful=retake_unfaithful, machine=here(os.environ)
    )
    return load_sweep([r.path for r in results])
