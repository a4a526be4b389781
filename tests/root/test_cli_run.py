"""The README's commands end to end, as a user types them: `python3 -m testbed run FILE -o DIR` and
`python3 -m testbed demo -o DIR` in a subprocess from the repo root, on Debian's /usr/bin/python3. Each must exit 0,
leave one complete and faithful record per sweep point and print where its HTML report is (the run path once
crashed for every user with an option cli.py never defined, and no test ran it)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3"

# The smallest fabric with a router hop: 1 spine, 2 leaves, 1 host each; one 3-second flow across the spine.
SMALL = """\
name: cli-small
description: the smallest routed fabric and one short iperf3 flow across the spine (tests/root/test_cli_run.py)
fabric:
  topology: spine-leaf
  spines: 1
  leaves: 2
  hosts_per_leaf: 1
  host_link: {rate: 100Mbit, buffer: 300KB, mtu: 9000}
  transport: {cc: cubic, ecn: true}
workload:
  - {kind: iperf, name: pair, src: l1h1, dst: l2h1, duration: 3}
duration: 20s
"""


def run_cli(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TESTBED_DEBUG"}
    return subprocess.run(
        [PY, "-m", "testbed", *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env
    )


def _cpu(manifest: dict[str, Any]) -> str:
    """The cpu_saturation check's value (share of samples with every core busy) and the mean busy share."""
    for c in (manifest.get("fidelity") or {}).get("checks", []):
        if c.get("name") == "cpu_saturation":
            return f"{c.get('value')} (mean busy {(c.get('details') or {}).get('mean_busy')})"
    return "n/a"


def check_command(cp: subprocess.CompletedProcess[str], out: Path, points: int) -> list[dict[str, Any]]:
    """Exit 0, one complete and faithful record per point under ``out``, and the HTML report it printed."""
    tail = f"\nstdout:\n{cp.stdout[-3000:]}\nstderr:\n{cp.stderr[-3000:]}"
    manifests = [json.loads(m.read_text()) for m in sorted(out.glob("*/manifest.json"))]
    verdicts = [
        f"{m.get('run_id')}: status {m.get('status')}, faithful {(m.get('fidelity') or {}).get('faithful')}, "
        f"cpu_saturation {_cpu(m)}; failed {(m.get('fidelity') or {}).get('failed')}; error {m.get('error')}"
        for m in manifests
    ]
    print("\n".join(verdicts))  # shown with -s or -rA: what each run's fidelity checks said
    assert cp.returncode == 0, f"exit {cp.returncode}\n" + "\n".join(verdicts) + tail
    assert len(manifests) == points, f"{len(manifests)} run records under {out}, expected {points}" + tail
    for m, line in zip(manifests, verdicts):
        assert m.get("status") == "complete", line
        assert (m.get("fidelity") or {}).get("faithful") is True, line
        assert f"complete  {out / m['run_id']}" in cp.stdout, f"{m['run_id']} not reported as complete" + tail
    found = re.findall(r"^HTML report: (.+)$", cp.stdout, re.M)
    assert len(found) == 1, "no 'HTML report: PATH' line" + tail
    report = Path(found[0])
    assert report.name == "report.html" and report.is_file() and report.stat().st_size > 0, report
    assert report.resolve().is_relative_to(out.resolve()), f"{report} is not under {out}"
    assert "NOT FAITHFUL" not in cp.stdout, tail
    return manifests


def test_run_a_small_scenario(tmp_path: Path) -> None:
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SMALL)
    out = tmp_path / "runs"
    # --wait: the option whose absence once broke `testbed run`; it also rides out another run on this machine
    cp = run_cli("run", str(scenario), "-o", str(out), "--wait", "600", timeout=900)
    (m,) = check_command(cp, out, points=1)
    assert m["scenario_name"] == "cli-small"


def test_demo(tmp_path: Path) -> None:
    """README's first command (`setup.sh demo` execs `python3 -m testbed demo`): the default experiment, one run per
    point (``--set repeat=1``: CI's demo stage runs the whole of it, with its repeats)."""
    from testbed.cli import DEFAULT_SCENARIO
    from testbed.spec.scenario import load_scenario_file
    from testbed.spec.settings import parse_setting

    points = len(load_scenario_file(Path(DEFAULT_SCENARIO), [parse_setting("repeat=1")]).points)
    out = tmp_path / "demo"
    cp = run_cli("demo", "-o", str(out), "--set", "repeat=1", timeout=1800)
    manifests = check_command(cp, out, points)
    assert {m["scenario_name"] for m in manifests} == {"default-ecn-vs-droptail"}
