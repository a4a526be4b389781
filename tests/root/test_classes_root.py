"""Traffic classes on a built fabric, as root: DSCP picks the class on every kind of port, strict priority starves
the lower class while the higher one fills the port, and weights split a congested port in their ratio."""

from __future__ import annotations

import csv
import itertools
import os
import subprocess
from pathlib import Path

import pytest

from testbed.fabric import classstats
from testbed.fabric.build import Fabric
from testbed.spec.fabric import FabricSpec
from tests.root.hoststate import run_one

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc)")]

CLASSES = [{"name": "ctrl", "dscp": [46], "priority": 1}, {"name": "be", "dscp": [0], "weight": 1}]


def test_dscp_picks_the_class_on_every_kind_of_port() -> None:
    """Pings with DSCP 46 (EF) from l1h1 to l2h1, and their replies (which keep the request's TOS), are counted in
    the ctrl class of each port they leave: host->leaf, leaf->spine, spine->leaf, leaf->host, both ways."""
    spec = FabricSpec.from_dict(
        {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "host_link": {"rate": "50Mbit", "classes": CLASSES}}
    )
    with Fabric(spec, lock_wait=300) as fab:
        dst = fab.hosts["l2h1"].ip
        ping = ["ip", "netns", "exec", fab.netns("l1h1"), "ping", "-c", "50", "-i", "0.005", "-Q", "0xb8", "-q", dst]
        subprocess.run(ping, check=True, capture_output=True, timeout=30)
        counted = {}
        for p in fab.ports():
            rows = {r["class"]: r for r in classstats.read(fab.netns(p.node), p)}
            counted[p.name] = (rows["ctrl"]["tx_pkts"], rows["be"]["tx_pkts"])
    path = ["l1h1", "l1", "s1", "l2", "l2h1"]
    links = list(itertools.pairwise(path))
    hops = [f"{a}->{b}" for a, b in links] + [f"{b}->{a}" for a, b in links]
    print({h: counted[h] for h in hops})
    for hop in hops:
        assert counted[hop][0] >= 50, (hop, counted[hop])  # every echo (or reply) in ctrl
        assert counted[hop][1] < 10, (hop, counted[hop])  # ARP and the like only in be (none are IP with 46)


SCENARIO = """\
name: classes-{name}
description: two UDP flows share l1->s1 and s1->l2, one per class (tests/root/test_classes_root.py)
fabric:
  spines: 1
  leaves: 2
  hosts_per_leaf: 2
  host_link:
    rate: 50Mbit
    buffer: 200KB
    classes:
      - {{name: hi, dscp: [46], {hi}}}
      - {{name: lo, dscp: [0], {lo}}}
workload:
  - {{kind: iperf, name: hi, src: l1h1, dst: l2h1, proto: udp, rate: 60Mbit, duration: 4, dscp: 46}}
  - {{kind: iperf, name: lo, src: l1h2, dst: l2h2, proto: udp, rate: 60Mbit, duration: 4}}
duration: 20s
"""


def _sent(tmp_path: Path, name: str, hi: str, lo: str) -> dict[str, int]:
    """Bytes each class sent at the port both flows share (l1->s1), from classes.csv. iperf3's own UDP figure is
    not used: its client learns the loss from the server over its control connection, which in the starved class
    may not get through."""
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(SCENARIO.format(name=name, hi=hi, lo=lo))
    run = run_one(scenario, tmp_path / name)
    with (run / "classes.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if (r["node"], r["dev"]) == ("l1", "l1-s1")]
    print(f"{name}: l1->s1 {[{k: r[k] for k in ('class', 'tx_bytes', 'tx_pkts', 'drops')} for r in rows]}")
    return {r["class"]: int(r["tx_bytes"]) for r in rows}


PORT_BYTES = 50e6 / 8 * 4  # the shared port's 4 s at 50 Mbit/s


def test_strict_priority_starves_the_low_class_while_the_high_one_fills_the_port(tmp_path: Path) -> None:
    sent = _sent(tmp_path, "strict", "priority: 1", "weight: 1")
    assert sent["hi"] > 0.9 * PORT_BYTES
    assert sent["lo"] < 0.01 * sent["hi"]  # an assured 1 kbit/s, nothing lent


def test_weights_split_a_congested_port_in_their_ratio(tmp_path: Path) -> None:
    sent = _sent(tmp_path, "weights", "weight: 3", "weight: 1")
    ratio = sent["hi"] / sent["lo"]
    print(f"weights 3:1: bytes sent {sent}, ratio {ratio:.3f}")
    assert abs(ratio - 3.0) < 0.3  # within 10%
    assert sent["hi"] + sent["lo"] > 0.9 * PORT_BYTES  # the port stays full
