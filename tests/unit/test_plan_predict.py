"""``testbed calibrate --predict`` (testbed.plan.predict): every point's predicted load, from the machine and the
cost model handed in (no environment, no root), each on the address plan its file drew."""

from __future__ import annotations

from pathlib import Path

from testbed.calibrate.model import FALLBACK
from testbed.host.capabilities import Capabilities
from testbed.host.machine import Machine
from testbed.plan.predict import format_predictions, predict_rows
from testbed.spec.scenario import load_scenario_file

DEFAULT = Path(__file__).resolve().parents[2] / "scenarios" / "default.yaml"


def test_one_row_per_point_judged_on_the_machine_handed_in() -> None:
    points = load_scenario_file(DEFAULT).points
    two = predict_rows([str(DEFAULT)], Machine.from_env(Capabilities(cpus=2), {}), FALLBACK)
    one = predict_rows([str(DEFAULT)], Machine.from_env(Capabilities(cpus=1), {}), FALLBACK)
    assert len(two) == len(points) and {r["file"] for r in two} == {"default.yaml"}
    assert all(r["total"] == 2 * s["total"] for r, s in zip(one, two, strict=True))  # a load is a share of the cores
    budget = Machine.from_env(Capabilities(cpus=2), {"TESTBED_CPU_BUDGET": "0.01"})
    assert not any(r["fits"] for r in predict_rows([str(DEFAULT)], budget, FALLBACK))  # the context's budget, no env
    assert format_predictions(two).splitlines()[0].split()[:2] == ["scenario", "point"]
