"""One capacity trial: a ring of iperf3 TCP flows (host i -> host i+1), each flow's goodput against its payload rate.

The launcher is a callable ``spawn(host, argv, stdout_file) -> Popen-like`` so the same trial runs on our fabric
(``ip netns exec``) and on stock Mininet (``node.popen``). Every flow uses cubic per socket (``-C cubic``), omits
its first second (slow start) and reports the receiver's bytes. CPU is the whole machine's /proc/stat busy share
over the measured part.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.calibrate.ring import iperf3_ring, ring_flows
from testbed.telemetry.cpu import busy_fractions, parse_proc_stat

Probe = Callable[[], list[dict[str, Any]]]
Spawn = Callable[[str, list[str], Path], Any]  # host, argv, stdout file -> an object with poll/wait/terminate/kill
PORT = 5301


@dataclass
class RingResult:
    rate_bps: float  # configured link rate
    payload_bps: float  # TCP goodput ceiling per flow
    goodputs: list[float]
    cpu_busy: float
    queue_rows: list[dict[str, Any]] = field(default_factory=list)  # root-qdisc backlog samples (probe)

    @property
    def max_avg_packet(self) -> float:
        """The largest backlog_bytes / backlog_pkts seen in a queue (> MTU + 14: GSO super-packets)."""
        avgs = [r["backlog_bytes"] / r["backlog_pkts"] for r in self.queue_rows if r["backlog_pkts"] > 0]
        return max(avgs, default=0.0)

    @property
    def worst(self) -> float:
        return min(self.goodputs) / self.payload_bps if self.goodputs else 0.0

    @property
    def faithful(self) -> bool:
        return bool(self.goodputs) and self.worst >= 0.95

    @property
    def aggregate_bps(self) -> float:
        return sum(self.goodputs)


def _stat() -> dict[str, tuple[int, int]]:
    return parse_proc_stat(Path("/proc/stat").read_text())


def settle(idle: float = 0.15, window: float = 0.3, max_s: float = 10.0) -> float:
    """Wait until the machine is idle (busy < ``idle`` over ``window``): deleting namespaces goes on in kernel
    workers after a teardown returns and would be counted in the next trial's CPU. Returns the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        a = _stat()
        time.sleep(window)
        if busy_fractions(a, _stat()).get("all", 1.0) < idle:
            break
    return time.monotonic() - t0


def ring_trial(
    spawn: Spawn,
    hosts: list[tuple[str, str]],
    rate_bps: float,
    mtu: int,
    seconds: float = 3.0,
    omit: float = 1.0,
    probe: Probe | None = None,
    probes: int = 3,
) -> RingResult:
    """``hosts``: (name, ip) in ring order. Returns each flow's receiver goodput and the CPU busy share."""
    n = len(hosts)
    payload = rate_bps * (mtu - 52) / (mtu + 14)
    flows = ring_flows([name for name, _ip in hosts])
    client_args = ["-t", f"{seconds:g}", "-O", f"{omit:g}", "-J", "-C", "cubic"]
    settle()
    with tempfile.TemporaryDirectory(prefix="tbd7-ring-") as tmp:
        d = Path(tmp)

        def launch(role: str, i: int, host: str, argv: list[str]) -> Any:
            return spawn(host, argv, d / (f"c{i}.json" if role == "client" else f"s{i}.txt"))

        with iperf3_ring(launch, flows, dict(hosts), PORT, client_args) as clients:
            time.sleep(omit)
            s0 = _stat()
            t_end = time.monotonic() + seconds
            rows: list[dict[str, Any]] = []
            for _ in range(probes if probe else 0):
                time.sleep(seconds / (probes + 1))
                rows += probe() if probe else []
            time.sleep(max(0.0, t_end - time.monotonic()))
            s1 = _stat()
            deadline = time.monotonic() + 10
            for c in clients:
                try:
                    c.wait(max(0.1, deadline - time.monotonic()))
                except (TimeoutError, subprocess.TimeoutExpired):
                    raise RuntimeError("an iperf3 client did not finish 10 s after its end") from None
        goodputs = []
        for i in range(n):
            text = (d / f"c{i}.json").read_text()
            try:
                res = json.loads(text)
            except json.JSONDecodeError:
                raise RuntimeError(f"iperf3 flow {i} gave no JSON: {text[-300:]}") from None
            if "error" in res:
                raise RuntimeError(f"iperf3 flow {hosts[i][0]} -> {hosts[(i + 1) % n][0]}: {res['error']}")
            goodputs.append(float(res["end"]["sum_received"]["bits_per_second"]))
    cpu = busy_fractions(s0, s1).get("all", 0.0)
    return RingResult(rate_bps, payload, goodputs, cpu, rows)


def parse_tc_json(node: str, text: str) -> list[dict[str, Any]]:
    """Root-qdisc backlog rows from ``tc -s -j qdisc show`` (the root's backlog includes its children's)."""
    out = []
    for q in json.loads(text or "[]"):
        if q.get("root") and q.get("dev") and "backlog" in q:
            out.append(
                {"node": node, "dev": q["dev"], "backlog_bytes": int(q["backlog"]), "backlog_pkts": int(q["qlen"])}
            )
    return out
