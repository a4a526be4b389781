"""Chaos: SIGKILL the harness at seeded random moments of build, traffic and teardown, clean, compare the host.

Each of ``KILLS`` runs starts `testbed run` on a small fabric (DCTCP on every other one, so the BPF
struct_ops and the allowed-list sysctl are in play where the kernel has no tcp_dctcp), kills it with SIGKILL at a
moment drawn from a seeded generator over the run's whole life, then runs `testbed clean`. The host must then be
as it was before the first run: namespaces, root links and routes, the congestion-control sysctls, struct_ops,
BPF pins, nft tables, processes in other namespaces, sampler stages, state files. A killed record reads
`incomplete` (or `complete`, when the kill came after the end), and one killed after its sampler had flushed rows
keeps them.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.host import structops
from testbed.host.waiting import wait_until
from tests.root.hoststate import ROOT, harness_run, procs_in_other_netns, staged_rows

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc)")]

KILLS = 10
SEED = 16
SCENARIO = """\
name: chaos
fabric: {{spines: 1, leaves: 2, hosts_per_leaf: 1, host_link: {{rate: 20Mbit, mtu: 9000}}, transport: {{cc: {cc}}}}}
workload:
  - {{kind: iperf, name: bulk, src: l1h1, dst: l2h1, duration: 2}}
duration: 10s
telemetry: {{queue_hz: 200}}
"""
LIFE_S = 7.0  # a run of SCENARIO lasts about 4-5 s here: kills are drawn over a little more, so some come late


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout


def host_state() -> dict[str, object]:
    """What a run may touch on the host, as comparable values."""
    sysctl = Path("/proc/sys/net/ipv4")
    return {
        "netns": _sh("ip", "netns", "list"),
        "links": sorted(line.split(":")[1].strip() for line in _sh("ip", "-o", "link", "show").splitlines()),
        "routes": _sh("ip", "route", "show", "table", "all"),
        "allowed_cc": (sysctl / "tcp_allowed_congestion_control").read_text(),
        "default_cc": (sysctl / "tcp_congestion_control").read_text(),
        "struct_ops": sorted(structops.registered()),
        "bpf_pins": sorted(str(p) for p in Path("/sys/fs/bpf").rglob("*")) if Path("/sys/fs/bpf").is_dir() else [],
        "nft": _sh("nft", "list", "tables"),
        "other_netns_pids": procs_in_other_netns(),
        "stages": sorted(p.name for p in Path("/dev/shm").glob("tbstage-*")),
        "state_files": sorted(p.name for p in Path("/run/testbed").glob("tb*.json")),
    }


def test_random_kills_leave_nothing_behind(tmp_path: Path) -> None:
    from results.record import find_runs

    before = host_state()
    rng = random.Random(SEED)
    seen: list[str] = []
    for i in range(KILLS):
        cc = "dctcp" if i % 2 else "cubic"
        scenario = tmp_path / f"chaos{i}.yaml"
        scenario.write_text(SCENARIO.format(cc=cc))
        out = tmp_path / f"runs{i}"
        at = rng.uniform(0.1, LIFE_S)
        with harness_run(scenario, out) as harness:  # SIGKILLed as the block ends, unless it finished first
            try:
                harness.wait(at)
                rows = 0
            except subprocess.TimeoutExpired:
                rows = staged_rows(harness.pid)
        cp = subprocess.run(
            [sys.executable, "-m", "testbed", "clean"], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert cp.returncode == 0, cp.stderr
        wait_until(
            lambda: host_state() == before,
            30,
            f"the host as before, after kill {i} at {at:.2f} s ({cc})",
            0.2,
            lambda: json.dumps({k: v for k, v in host_state().items() if v != before[k]}, default=str)[:2000],
        )
        records = find_runs([out]) if out.exists() and any(out.rglob("manifest.json")) else []
        for run in records:
            assert run.status in ("incomplete", "complete", "failed"), (i, run.status)
            if rows > 1 and run.status == "incomplete":
                assert len(run.table("queues")) > 0, f"kill {i} at {at:.2f} s: {rows} staged rows were lost"
        seen.append(f"{at:.2f}s:{records[0].status if records else 'no record'}:{rows}")
    print("\nkills (time:status:staged rows):", " ".join(seen))
