"""PFC-style lossless classes on a built fabric, as root: a 4:1 incast of TCP flows in a lossless class loses no
packet and records its pauses, and the same incast without `lossless` drops (tests/unit/test_pfc_spec.py has the parts
that need no kernel)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from testbed.fabric.pfc import REACTION_BOUND_S
from tests.root.hoststate import run_one

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc, BPF)")]

SCENARIO = """\
name: pfc-{name}
description: a 4:1 incast into l1h1 in class rdma (tests/root/test_pfc_root.py)
fabric:
  spines: 1
  leaves: 2
  hosts_per_leaf: 3
  host_link:
    rate: 50Mbit
    buffer: 200KB
    mtu: 9000
    classes:
      - {{name: rdma, dscp: [26], weight: 1{lossless}}}
      - {{name: be, dscp: [0], weight: 1}}
  fabric_link: {{rate: 100Mbit}}
  transport: {{cc: cubic, ecn: false}}
workload:
  - {{kind: iperf, name: a, src: l1h2, dst: l1h1, duration: 4, dscp: 26}}
  - {{kind: iperf, name: b, src: l1h3, dst: l1h1, duration: 4, dscp: 26}}
  - {{kind: iperf, name: c, src: l2h1, dst: l1h1, duration: 4, dscp: 26}}
  - {{kind: iperf, name: d, src: l2h2, dst: l1h1, duration: 4, dscp: 26}}
duration: 20s
"""


def _run(tmp_path: Path, name: str, lossless: str) -> tuple[Path, int]:
    """The incast's record and the packets the rdma class dropped at every port (classes.csv)."""
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(SCENARIO.format(name=name, lossless=lossless))
    run = run_one(scenario, tmp_path / name)
    with (run / "classes.csv").open() as f:
        drops = sum(int(r["drops"]) for r in csv.DictReader(f) if r["class"] == "rdma")
    return run, drops


def test_a_lossless_incast_drops_nothing_and_records_its_pauses(tmp_path: Path) -> None:
    run, drops = _run(tmp_path, "lossless", ", lossless: {xoff: 40KB, xon: 20KB}")
    manifest = json.loads((run / "manifest.json").read_text())
    pfc = manifest["pfc"]
    with (run / "pauses.csv").open() as f:
        pauses = list(csv.DictReader(f))
    window = manifest["traffic_window"][1] - manifest["traffic_window"][0]
    print(f"drops {drops}, pauses {len(pauses)}, reaction {pfc['reaction_us']}, controller {pfc['cpu_s']} s CPU "
          f"over {window:.1f} s ({pfc['cpu_s'] / window:.3f} of a core)")  # fmt: skip
    assert drops == 0
    assert {p["port"] for p in pauses} >= {"s1->l1", "l1h2->l1", "l1h3->l1"}  # the receiver's leaf pauses its feeds
    assert all(p["queue"] == "l1->l1h1" for p in pauses if p["router"] == "l1")
    assert pfc["reaction_us"]["p99"] < REACTION_BOUND_S * 1e6 and not pfc["errors"]
    assert manifest["fidelity"]["faithful"], manifest["fidelity"]["failed"]


def test_the_same_incast_without_lossless_drops(tmp_path: Path) -> None:
    run, drops = _run(tmp_path, "lossy", "")
    print(f"drops {drops}")
    assert drops > 0
    assert not (run / "pauses.csv").exists() and "pfc" not in json.loads((run / "manifest.json").read_text())
