"""Figure (a): the highest aggregate rate emulated faithfully, our fabric vs stock Mininet, MTU 1500 and 9000.

A 2-spine x 4-leaf x 2-host spine-leaf fabric, every link at the same rate, 8 iperf3 flows in a ring (host i ->
host i+1: half stay under one leaf, half cross a spine; no link carries two flows). A rate is emulated faithfully
when every flow reaches 0.95 of its payload rate. Every rate is tried (stock Mininet is not monotonic: with GSO on,
its low rates are uneven while high ones pass); the figure is 8 x the highest faithful per-link rate, with every
rate's outcome listed (a figure at the top rate is a lower bound).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Any

from bench.ring import RingResult, parse_tc_json, ring_trial
from bench.stock import stock_net
from testbed.calibrate.rig import fabric_spec_dict
from testbed.fabric.build import Fabric
from testbed.spec.fabric import FabricSpec

RATES_MBIT = (25, 50, 100, 200, 400, 800)


def ours(rate_mbit: float, mtu: int, seconds: float) -> RingResult:
    spec = FabricSpec.from_dict(fabric_spec_dict(rate_mbit * 1e6, mtu))
    with Fabric(spec, lock_wait=30) as fab:
        hosts = [(n, h.ip) for n, h in fab.hosts.items()]

        def spawn(host: str, argv: list[str], out: Any) -> Any:
            return fab.procs.spawn(f"iperf3-{host}", argv, netns=fab.netns(host), stdout=out)

        routers = [n for n, node in fab.topo.nodes.items() if node.is_router]

        def probe() -> list[dict[str, Any]]:
            rows = []
            for r in routers:
                out = subprocess.run(
                    ["tc", "-n", fab.netns(r), "-s", "-j", "qdisc", "show"], capture_output=True, text=True
                )
                rows += parse_tc_json(r, out.stdout)
            return rows

        return ring_trial(spawn, hosts, rate_mbit * 1e6, mtu, seconds, probe=probe)


def stock(rate_mbit: float, mtu: int, seconds: float) -> RingResult:
    spec = FabricSpec.from_dict(fabric_spec_dict(rate_mbit * 1e6, mtu))
    with stock_net(spec, rate_mbit, mtu) as sn:
        hosts = [(n, h.ip) for n, h in sn.topo.hosts.items()]
        routers = [n for n, node in sn.topo.nodes.items() if node.is_router]

        def probe() -> list[dict[str, Any]]:
            return [row for r in routers for row in parse_tc_json(r, sn.node(r).cmd("tc -s -j qdisc show"))]

        return ring_trial(sn.popen, hosts, rate_mbit * 1e6, mtu, seconds, probe=probe)


@dataclass
class Search:
    best_mbit: float = 0.0
    trials: list[tuple[float, RingResult]] = field(default_factory=list)
    error: str = ""

    @property
    def aggregate_mbit(self) -> float:
        return 8 * self.best_mbit

    @property
    def unfaithful_below(self) -> list[float]:
        return [r for r, res in self.trials if not res.faithful and r < self.best_mbit]

    def describe(self) -> str:
        parts = [
            f"{r:g}M:{res.worst:.2f}{'' if res.faithful else '(x)'}/{res.cpu_busy:.0%}cpu" for r, res in self.trials
        ]
        return " ".join(parts) + (f" error: {self.error}" if self.error else "")


def search(which: str, mtu: int, rates: tuple[float, ...] = RATES_MBIT, seconds: float = 3.0) -> Search:
    fn = ours if which == "ours" else stock
    s = Search()
    for rate in rates:
        try:
            res = fn(rate, mtu, seconds)
        except Exception as exc:  # a failed trial ends the search; the figure says why
            s.error = f"{rate:g} Mbit: {type(exc).__name__}: {exc}"[:300]
            break
        s.trials.append((rate, res))
        if res.faithful:
            s.best_mbit = rate
    return s
