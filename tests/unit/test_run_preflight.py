"""run_file refuses a point the machine cannot run before anything is built, as bad input: SpecError, exit 2
(no root: the probe is canned and run_point must never be reached)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed import run as run_mod
from testbed.host.capabilities import NEEDS, Capabilities
from testbed.host.machine import Machine
from testbed.plan import budget as pf_budget
from testbed.plan.budget import BudgetError
from testbed.spec.fields import SpecError
from testbed.spec.scenario import expand

DELAYED = {
    "name": "delayed",
    "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "host_link": {"rate": "10Mbit", "delay": "1ms"}},
    "duration": "2s",
    "sweep": {"fabric.host_link.rate": ["10Mbit", "20Mbit"]},
}


def _no_run(monkeypatch: pytest.MonkeyPatch, caps: dict[str, Any]) -> Machine:
    def run_point(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a refused file reached run_point")

    monkeypatch.setattr(run_mod, "run_point", run_point)
    return Machine(Capabilities.from_dict(caps))


def test_delay_without_netem_is_refused_as_bad_input(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A CapabilityError here exited 1, where the README promises 2 for what cannot run here."""
    caps: dict[str, Any] = {n.key: True for n in NEEDS}
    caps["qdisc.netem"] = False
    machine = _no_run(monkeypatch, caps)
    with pytest.raises(SpecError, match=r"^sweep point fabric\.host_link\.rate=10Mbit: link delay needs sch_netem"):
        run_mod.run_file(expand(DELAYED), tmp_path, machine=machine)
    assert list(tmp_path.iterdir()) == []


def test_a_budget_refusal_is_bad_input_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    caps: dict[str, Any] = {n.key: True for n in NEEDS}
    machine = _no_run(monkeypatch, caps)

    def over_budget(point: Any, caps: Any, **kw: Any) -> None:
        raise BudgetError("needs 1.9 cores of 2 at a 75% budget")

    monkeypatch.setattr(pf_budget, "require_budget", over_budget)
    with pytest.raises(SpecError, match=r"1\.9 cores") as err:
        run_mod.run_file(expand(DELAYED), tmp_path, machine=machine)
    assert isinstance(err.value.__cause__, BudgetError)
