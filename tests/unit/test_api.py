"""``testbed.api``: what it refuses before touching a fabric, and that reading records imports none of the
emulation (no root, no fabric build)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from testbed import api
from testbed.spec.fields import SpecError

REPO = Path(__file__).resolve().parents[2]
SCENARIO: dict[str, Any] = {
    "name": "api",
    "fabric": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "host_link": {"rate": "100Mbit", "buffer": "300KB"}},
    "workload": [{"kind": "allreduce", "name": "ring", "algorithm": "ring", "ranks": "all", "size": "1MB"}],
    "duration": "5s",
}


def test_importing_the_api_builds_nothing() -> None:
    code = (
        "import sys, testbed.api;"
        "print(sorted(m for m in sys.modules if m in ('testbed.run', 'testbed.fabric.build', 'traffic.workload')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_jobs_refuses_a_job_the_scenario_lacks() -> None:
    with pytest.raises(SpecError, match=r"^workload: no job rnig in api: jobs are ring$"):
        api.run_jobs(cast(Any, None), SCENARIO, jobs=["rnig"])


def test_run_sweep_leaves_a_guest_kernel_to_testbed_run() -> None:
    with pytest.raises(SpecError, match=r"^kernel: stock"):
        api.run_sweep({**SCENARIO, "kernel": "stock"})


def test_load_scenario_and_its_points(tmp_path: Path) -> None:
    scenario = api.load_scenario(SCENARIO)
    assert [j.name for j in scenario.workload] == ["ring"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "repeat": 2, "sweep": {"fabric.host_link.buffer": ["50KB", "1MB"]}}))
    points = api.load_scenario_file(path).points  # one per sweep value and repetition
    assert [(dict(p.variant)["fabric.host_link.buffer"], p.repeat_index) for p in points] == [
        ("50KB", 0),
        ("50KB", 1),
        ("1MB", 0),
        ("1MB", 1),
    ]


def test_the_public_names() -> None:
    assert sorted(api.__all__) == sorted(
        [
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
    )
    assert all(hasattr(api, name) for name in api.__all__)
