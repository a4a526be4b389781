"""run_file's retake of unfaithful points (no root: run_point and the probe are replaced)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed import run as run_mod
from testbed.fabric.pfc import PfcPlan
from testbed.fabric.portplan import FabricPlan
from testbed.host.capabilities import Capabilities
from testbed.host.machine import Machine
from testbed.plan import point as point_mod
from testbed.spec.scenario import expand

SCENARIO = {
    "name": "retake",
    "fabric": {"spines": 1, "leaves": 1, "hosts_per_leaf": 2, "host_link": {"rate": "10Mbit", "buffer": "100KB"}},
    "duration": "1s",
    "sweep": {"fabric.host_link.buffer": ["50KB", "100KB"]},
}
MACHINE = Machine(Capabilities())


def fake_run(monkeypatch: pytest.MonkeyPatch, verdicts: list[bool | None]) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def run_point(plan: Any, out: Path, lock_wait: float = 0.0, retake_of: Any = None) -> Any:
        n = len(calls)
        calls.append({"variant": dict(plan.scenario.variant), "retake_of": retake_of})
        status = "complete" if verdicts[n] is not None else "failed"
        return run_mod.RunResult(out / f"run{n}", status, verdicts[n])

    monkeypatch.setattr(run_mod, "run_point", run_point)
    # the checks pass: the plan of the fabric as it is, no port marked
    monkeypatch.setattr(point_mod, "plan_fabric", lambda spec, caps, topo: FabricPlan(topo, (), PfcPlan((), ())))
    return calls


def test_an_unfaithful_point_is_retaken_once_and_the_first_record_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = fake_run(monkeypatch, [True, False, True])
    results = run_mod.run_file(expand(SCENARIO), tmp_path, retake_unfaithful=1, machine=MACHINE)
    assert [r.path.name for r in results] == ["run0", "run2"]
    assert results[0].retaken == ()
    assert results[1].retaken == (tmp_path / "run1",) and results[1].faithful is True
    assert calls[2]["retake_of"] == ["run1"] and calls[2]["variant"] == calls[1]["variant"]


def test_retakes_stop_at_the_limit_and_the_point_stays_unfaithful(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = fake_run(monkeypatch, [False, False, False, True])
    results = run_mod.run_file(expand(SCENARIO), tmp_path, retake_unfaithful=1, machine=MACHINE)
    assert results[0].faithful is False and results[0].retaken == (tmp_path / "run0",)
    assert results[1].path.name == "run3" and results[1].retaken == (tmp_path / "run2",)
    assert len(calls) == 4


def test_no_retake_by_default_and_none_for_a_failed_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_run(monkeypatch, [False, None])
    results = run_mod.run_file(expand(SCENARIO), tmp_path, machine=MACHINE)
    assert [r.faithful for r in results] == [False, None] and all(r.retaken == () for r in results)
    calls = fake_run(monkeypatch, [None, True])
    results = run_mod.run_file(expand(SCENARIO), tmp_path, retake_unfaithful=3, machine=MACHINE)
    assert [r.status for r in results] == ["failed", "complete"] and len(calls) == 2
