"""The run's CPU budget: process roles, the harness/emulation split, and CPU kept across a process's exit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from testbed.host.procs import ProcessGroup
from testbed.telemetry.budget import CpuBudget, role_of, summarize_budget

NS = ["/usr/sbin/ip", "netns", "exec", "tb1234-l1h1"]


@pytest.mark.parametrize(
    ("name", "argv", "role"),
    [
        ("telemetry-sampler", ["/usr/bin/python3", "-m", "testbed.telemetry.sampler"], "sampler"),
        ("ar:rank0", [*NS, "/usr/bin/python3", "-m", "traffic.worker", "c.json", "0"], "workers"),
        ("bg:client", [*NS, "sh", "-c", 'n=$1; iperf3 "$@" -t 5', "sh"], "iperf3"),
        ("x:tool", [*NS, "sh", "-c", "loop", "sh"], "other"),
        ("bg:server", [*NS, "/usr/bin/iperf3", "-s", "-p", "5201"], "iperf3"),
        ("inc:sink", [*NS, "/usr/bin/python3", "-m", "traffic.flowtools", "c.json", "sink"], "probes"),
        ("t:send", [*NS, "/usr/bin/python3", "-m", "traffic.scapy_train", "c.json", "send"], "scapy"),
    ],
)
def test_roles_from_the_command_line(name: str, argv: list[str], role: str) -> None:
    assert role_of(name, argv) == role


def test_harness_is_sampler_and_main_in_full_and_traffic_user_time() -> None:
    stat0 = {"user": 0.0, "system": 0.0, "softirq": 0.0, "idle": 0.0}
    stat1 = {"user": 4.0, "system": 3.0, "softirq": 1.0, "idle": 12.0}
    per_role = {
        "sampler": {"user_s": 1.0, "system_s": 1.0},
        "workers": {"user_s": 1.5, "system_s": 2.0},
        "main": {"user_s": 0.5, "system_s": 0.0},
    }
    b = summarize_budget(10.0, 2, stat0, stat1, per_role, [])
    assert b["busy_core_s"] == 8.0 and b["busy_share"] == 0.4
    assert b["harness_core_s"] == 4.0 and b["harness_share"] == 0.2  # 2 + 1.5 (workers' user) + 0.5
    assert b["emulation_core_s"] == 4.0 and b["emulation_share"] == 0.2
    assert b["harness_by_role"] == {"main": 0.5, "sampler": 2.0, "workers": 1.5}


def test_cpu_of_an_exited_process_is_kept(tmp_path: Path) -> None:
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    with ProcessGroup() as pg:
        budget = CpuBudget()
        budget.start(pg.procs)
        p = pg.spawn("spinner", [sys.executable, "-c", spin])
        assert p.wait(timeout=30) == 0
        out = budget.stop(pg.procs)
    (proc,) = out["processes"]
    assert proc["user_s"] + proc["system_s"] >= 0.25  # from wait4: /proc no longer has it
    other = out["by_role"]["other"]
    assert other["user_s"] + other["system_s"] >= 0.25
