"""Traffic classes on a built fabric, as root: DSCP picks the class on every kind of port, strict priority starves
the lower class while the higher one fills the port, and weights split a congested port in their ratio."""

from __future__ import annotations

import csv
import itertools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml

from testbed.fabric import classstats
from testbed.fabric.build import Fabric
from testbed.fabric.tc import CLASS_RATE_BPS, htb_burst
from testbed.spec.fabric import FabricSpec
from testbed.spec.link import ETH_HEADER
from testbed.spec.topology import Port, Topology
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
    rate: 100Mbit
    buffer: 200KB
    classes:
      - {{name: hi, dscp: [46], {hi}}}
      - {{name: lo, dscp: [0], {lo}}}
  fabric_link: {{rate: 50Mbit}}
workload:
  - {{kind: iperf, name: hi, src: l1h1, dst: l2h1, proto: udp, rate: {rate}bit, duration: {duration}, dscp: 46}}
  - {{kind: iperf, name: lo, src: l1h2, dst: l2h2, proto: udp, rate: {rate}bit, duration: {duration}}}
duration: 20s
"""
SHARED = ("l1", "s1")  # the first port both flows cross: the hosts' links are faster, so both queue here
HI_DURATION_S = 4  # both flows' seconds
OFFERED_BPS = 60_000_000  # each flow's UDP rate, above the shared port's: the classes stay backlogged there


def _scenario(tmp_path: Path, name: str, hi: str, lo: str) -> Path:
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(SCENARIO.format(name=name, hi=hi, lo=lo, rate=OFFERED_BPS, duration=HI_DURATION_S))
    return scenario


def _shared_port(scenario: Path) -> Port:
    fabric = FabricSpec.from_dict(yaml.safe_load(scenario.read_text())["fabric"])
    return next(p for p in Topology(fabric).ports() if (p.node, p.peer) == SHARED)


def _sent(run: Path) -> dict[str, int]:
    """Bytes each class sent at the port both flows share (l1->s1), from classes.csv. iperf3's own UDP figure is
    not used: its client learns the loss from the server over its control connection, which in the starved class
    may not get through."""
    with (run / "classes.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if (r["node"], r["dev"]) == ("l1", "l1-s1")]
    print(f"{run.name}: l1->s1 {[{k: r[k] for k in ('class', 'tx_bytes', 'tx_pkts', 'drops')} for r in rows]}")
    return {r["class"]: int(r["tx_bytes"]) for r in rows}


@dataclass(frozen=True)
class Delivered:
    """Each flow's bytes delivered to its receiver over time: l2's port towards l2h1 carries only the high class's
    flow, the one towards l2h2 only the low one's. The sampler reads both in one tick, so they share timestamps."""

    hi: pd.Series  # cumulative tx_bytes by sample time
    lo: pd.Series

    @classmethod
    def read(cls, run: Path) -> Delivered:
        q = pd.read_csv(run / "queues.csv")
        q = q[q["node"] == "l2"]
        return cls(*(q[q["dev"] == dev].set_index("t")["tx_bytes"].sort_index() for dev in ("l2-l2h1", "l2-l2h2")))

    def hi_data_span(self, frame: int) -> tuple[float, float]:
        """The sample that first saw the high flow's data, and the sample before the last that did: data is a
        step of at least half a frame (its control packets are smaller). The low class can have been draining
        its queue by the last such sample, but not by the one before, when high packets were still arriving."""
        steps = self.hi.diff()
        data = steps.index[steps >= frame / 2]
        return float(data[0]), float(self.hi.index[self.hi.index < data[-1]][-1])

    def lo_between(self, t0: float, t1: float) -> int:
        return int(self.lo.asof(t1) - self.lo.asof(t0))

    def hi_between(self, t0: float, t1: float) -> int:
        return int(self.hi.asof(t1) - self.hi.asof(t0))


PORT_BYTES = 50e6 / 8 * 4  # the shared port's 4 s at 50 Mbit/s


def test_strict_priority_starves_the_low_class_while_the_high_one_fills_the_port(tmp_path: Path) -> None:
    """While the high class is backlogged at the shared port, HTB lends the low class nothing: it sends only on its
    own assured rate and bucket. The window is from when the high class's queue has filled (its buffer at the
    rate it arrives beyond the port's) to its last packets; outside it the low class may take the port (before
    the high flow's first packets, and when its queue drains after the high flow ends)."""
    scenario = _scenario(tmp_path, "strict", "priority: 1", "weight: 1")
    run = run_one(scenario, tmp_path / "strict")
    sent = _sent(run)
    link = _shared_port(scenario).link
    frame = link.mtu + ETH_HEADER
    (hi_class,) = [c for c in link.classes if c.name == "hi"]
    hi_fill_s = link.class_buffer(hi_class).to_bytes(link.mtu) / ((OFFERED_BPS - link.rate_bps) / 8)
    delivered = Delivered.read(run)
    hi_first, hi_last = delivered.hi_data_span(frame)
    start, end = hi_first + hi_fill_s, hi_last
    window_s = end - start
    lo_in_window = delivered.lo_between(start, end)
    hi_in_window = delivered.hi_between(start, end)
    lo_before = int(delivered.lo.asof(start))
    lo_after = int(delivered.lo.iloc[-1]) - int(delivered.lo.asof(end))

    lo_assured = CLASS_RATE_BPS / 8 * window_s
    lo_bucket = htb_burst(link)
    lo_overdraft = frame
    head_of_line = frame
    bound = lo_assured + lo_bucket + lo_overdraft + head_of_line
    terms = (
        f"low class {lo_in_window} B in {window_s:.3f} s while the high class sent {hi_in_window} B "
        f"(share {lo_in_window / max(hi_in_window, 1):.4%}); bound {bound:.0f} B "
        f"({bound / max(hi_in_window, 1):.4%}) = assured {lo_assured:.0f} (rate {CLASS_RATE_BPS} bit/s) "
        f"+ bucket {lo_bucket} + overdraft {lo_overdraft} + head of line {head_of_line}; "
        f"outside the window: {lo_before} B before (high queue filling {hi_fill_s:.3f} s), {lo_after} B after"
    )
    print(terms)
    assert sent["hi"] > 0.9 * PORT_BYTES, (sent, terms)
    assert window_s > 0.9 * (HI_DURATION_S - hi_fill_s), terms
    assert hi_in_window > 0.9 * link.rate_bps / 8 * window_s, terms
    assert lo_in_window <= bound, terms


def test_weights_split_a_congested_port_in_their_ratio(tmp_path: Path) -> None:
    sent = _sent(run_one(_scenario(tmp_path, "weights", "weight: 3", "weight: 1"), tmp_path / "weights"))
    ratio = sent["hi"] / sent["lo"]
    print(f"weights 3:1: bytes sent {sent}, ratio {ratio:.3f}")
    assert abs(ratio - 3.0) < 0.3  # within 10%
    assert sent["hi"] + sent["lo"] > 0.9 * PORT_BYTES  # the port stays full
