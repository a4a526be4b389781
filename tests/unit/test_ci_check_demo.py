""".ci/check_demo.py, CI's verdict on README's first command, over made-up demo outputs (no root): exit 0 only when
every point of the default scenario has a complete, faithful record and the report exists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testbed.spec.scenario import load_scenario_file

REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
SCRIPT = REPO / ".ci" / "check_demo.py"


def record(out: Path, name: str, status: str = "complete", faithful: bool | None = True, **extra: Any) -> None:
    d = out / name
    d.mkdir(parents=True)
    fidelity = (
        None
        if faithful is None
        else {
            "faithful": faithful,
            "failed": [] if faithful else ["cpu_saturation: all 2 cores >= 95% busy in 40% of 600 samples"],
            "checks": [{"name": "cpu_saturation", "ok": faithful, "value": 0.02 if faithful else 0.4}],
        }
    )
    (d / "manifest.json").write_text(json.dumps({"run_id": name, "status": status, "fidelity": fidelity, **extra}))


POINTS = len(load_scenario_file(REPO / "scenarios" / "default.yaml").points)  # every variant and repeat


def demo_output(out: Path) -> Path:
    """What a good demo leaves: a record per point of the default scenario and the report; returns its stdout."""
    record(out, "20261201T000000Z-default-ecn-off")
    record(out, "20261201T000100Z-default-ecn-step-k30KB")
    for i in range(2, POINTS):
        record(out, f"20261201T0002{i:02d}Z-default-r{i}")
    report = out / "reports" / "20261201T000000Z-default-ecn-off" / "report.html"
    report.parent.mkdir(parents=True)
    report.write_text("<html></html>")
    log = out / "demo-output.log"
    log.write_text(f"complete  {out}/a\ncomplete  {out}/b\nHTML report: {report}\n")
    return log


def check(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, str(SCRIPT), str(out), *extra], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_good_demo_passes(tmp_path: Path) -> None:
    log = demo_output(tmp_path)
    cp = check(tmp_path, "--stdout", str(log))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert cp.stdout.splitlines()[-1] == f"check_demo: ok: {tmp_path}"
    assert "cpu_saturation 0.02" in cp.stdout


def test_a_superseded_unfaithful_take_is_not_judged(tmp_path: Path) -> None:
    demo_output(tmp_path)
    record(tmp_path, "20261201T000050Z-default-ecn-off", faithful=False)
    (tmp_path / "20261201T000000Z-default-ecn-off" / "manifest.json").write_text(
        json.dumps(
            {
                "run_id": "20261201T000000Z-default-ecn-off",
                "status": "complete",
                "fidelity": {"faithful": True, "checks": []},
                "retake_of": ["20261201T000050Z-default-ecn-off"],
            }
        )
    )
    cp = check(tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr


@pytest.mark.parametrize(
    "spoil, needle",
    [
        (lambda out: record(out, "20261201T000200Z-default-x", faithful=False), "NOT FAITHFUL: cpu_saturation"),
        (lambda out: record(out, "20261201T000200Z-default-x", status="failed", error="Boom"), "status failed"),
        (lambda out: record(out, "20261201T000200Z-default-x", faithful=None), "no fidelity verdict"),
        (lambda out: (out / "reports" / "20261201T000000Z-default-ecn-off" / "report.html").unlink(), "report"),
        (lambda out: (out / "20261201T000100Z-default-ecn-step-k30KB" / "manifest.json").unlink(), f"{POINTS} points"),
        (lambda out: (out / "demo-output.log").write_text("complete ...\n"), "'HTML report: PATH' lines"),
    ],
    ids=["unfaithful", "failed", "no-verdict", "no-report", "a-point-missing", "no-report-line"],
)
def test_a_bad_demo_fails(tmp_path: Path, spoil: Any, needle: str) -> None:
    log = demo_output(tmp_path)
    spoil(tmp_path)
    cp = check(tmp_path, "--stdout", str(log))
    assert cp.returncode == 1, cp.stdout + cp.stderr
    assert needle in cp.stdout, cp.stdout
    assert cp.stdout.splitlines()[-1] == f"check_demo: FAIL: {tmp_path}"


def test_nothing_written_fails(tmp_path: Path) -> None:
    assert check(tmp_path / "missing").returncode == 1
    cp = check(tmp_path)
    assert cp.returncode == 1 and "no run records" in cp.stdout, cp.stdout
