"""Per-packet spraying (``ecmp.mode: spray``) against static ECMP for one TCP flow on a 2-spine fabric, as root:
spraying splits the flow's bytes evenly over both spines, static hashing keeps it on one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc)")]
REPO = Path(__file__).resolve().parents[2]
SCENARIO = """\
name: spray-{mode}
description: one iperf3 flow over 2 spines, ecmp.mode {mode} (tests/root/test_spray.py)
fabric:
  topology: spine-leaf
  spines: 2
  leaves: 2
  hosts_per_leaf: 1
  host_link: {{rate: 100Mbit, buffer: 300KB, mtu: 9000}}
  ecmp: {{mode: {mode}, seed: 1}}
workload:
  - {{kind: iperf, name: one, src: l1h1, dst: l2h1, duration: 3}}
duration: 20s
"""


def _run(tmp_path: Path, mode: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    scenario = tmp_path / f"{mode}.yaml"
    scenario.write_text(SCENARIO.format(mode=mode))
    out = tmp_path / mode
    cp = subprocess.run(
        ["/usr/bin/python3", "-m", "testbed", "run", str(scenario), "-o", str(out), "--no-report"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    (run,) = [p.parent for p in out.glob("*/manifest.json")]
    flows = (run / "flows.csv").read_text().splitlines()
    path = flows[1].split(",")[flows[0].split(",").index("path")]
    return json.loads((run / "manifest.json").read_text()), json.loads((run / "summary.json").read_text()), path


def test_spray_splits_one_flow_over_both_spines(tmp_path: Path) -> None:
    manifest, summary, path = _run(tmp_path, "spray")
    assert manifest["load_balancing"] == {"mode": "spray", "pick": "round-robin", "ways": {"l1": 2, "l2": 2}}
    spines = summary["bytes_per_spine"]
    print(f"spray: bytes per spine {spines}, goodput {summary['goodput_bps'] / 1e6:.1f} Mbit/s, path {path}")
    assert set(spines) == {"s1", "s2"}
    assert abs(spines["s1"] - spines["s2"]) < 0.1 * max(spines.values()), spines  # within 10%
    assert path == "l1h1>l1>s1|s2>l2>l2h1"
    assert summary["goodput_bps"] > 0.9 * 100e6 * 8946 / 9014
    # the same flow under static ECMP: one spine carries it (the other sees only the reverse path's ACKs at most)
    manifest, summary, path = _run(tmp_path, "static")
    assert manifest["load_balancing"]["mode"] == "static"
    spines = summary["bytes_per_spine"]
    print(f"static: bytes per spine {spines}, path {path}")
    assert min(spines.values()) < 0.05 * max(spines.values()), spines
    assert "|" not in path
