"""The per-CPU canary (testbed.telemetry.canary): lateness that run delay does not explain is a stall.

A stopped process is neither running nor runnable, exactly as a CPU the hypervisor does not run: SIGSTOP on the
canary for a known time must show as a stall of about that time on every CPU, and nothing else changes."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.host.waiting import wait_until
from testbed.telemetry.canary import CanaryConfig, health, unexplained

REPO = Path(__file__).resolve().parents[2]


def test_waiting_for_the_cpu_explains_lateness():
    assert abs(unexplained(0.050, 0.049) - 0.001) < 1e-12
    assert unexplained(0.010, 0.020) == 0.0  # run delay from before the due time: never negative
    assert unexplained(0.300, 0.0) == 0.3


def test_health_totals_per_cpu():
    rows = [
        {"t": 1.0, "cpu": 0, "late_s": 0.2, "waited_s": 0.0, "stalled_s": 0.2},
        {"t": 2.0, "cpu": 0, "late_s": 0.01, "waited_s": 0.0, "stalled_s": 0.01},
    ]
    h = health(rows, {0: 100, 1: 100}, 0.01, 1.0, CanaryConfig())
    assert h["per_cpu"]["0"] == {"ticks": 100, "stalls": 2, "stalled_s": pytest.approx(0.21), "max_s": 0.2}
    assert h["per_cpu"]["1"]["stalls"] == 0 and h["max_stall_s"] == 0.2


def test_a_stopped_canary_records_the_stop_as_a_stall(tmp_path: Path):
    cfg = tmp_path / "canary_config.json"
    cfg.write_text(json.dumps(CanaryConfig(period_s=0.005, min_stall_s=0.02).to_dict()))
    cmd = [sys.executable, "-m", "testbed.telemetry.canary", "--config", str(cfg), "--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=REPO)
    try:
        wait_until(lambda: (tmp_path / "canary.ready").exists(), 10.0, "canary ready")
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.3)  # the stimulus: the canary is stopped this long
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10.0) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = list(csv.DictReader((tmp_path / "cpu_stalls.csv").open()))
    h = json.loads((tmp_path / "canary_health.json").read_text())
    cpus = set(h["per_cpu"])
    stalled = {r["cpu"] for r in rows if float(r["stalled_s"]) >= 0.25}
    assert stalled == cpus, (rows, h)
    assert all(v["ticks"] > 0 for v in h["per_cpu"].values())
