"""A four-namespace topology for the ECN tests: two senders -> router -> receiver, veth, one bottleneck.

s1 (10.103.1.1) and s2 (10.103.2.1) send to d (10.103.3.1) through r; r's egress towards d is shaped the way
testbed/fabric/tc.py shapes every port (htb root 1:, class 1:1 at the rate, leaf 10:). MTU 1500, gso_max_segs 1 on
every interface, so the queue holds real 1514-byte frames. Also: a queue sampler (tc -s -j polled in a thread)
and the receiver's /proc/net/netstat counters.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.host.waiting import wait_listening
from testbed.spec.units import parse_size

PREFIX = "tbd3"
HOSTS = {"s1": "10.103.1.1", "s2": "10.103.2.1", "d": "10.103.3.1"}
BOTTLENECK = ("r", "r-d")


def sh(*cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.returncode} {res.stderr.strip()}")
    return res


def ns(node: str) -> str:
    return f"{PREFIX}-{node}"


def nsx(node: str, *cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return sh("nsenter", f"--net=/run/netns/{ns(node)}", *cmd, check=check, timeout=timeout)


@dataclass
class Net:
    rate: str = "100mbit"
    # the tests' LinkSpec buffer, 300KB, as tc reads it (KB = 1024 B): test_ecn_marker compares the two
    leaf: list[str] = field(default_factory=lambda: ["bfifo", "limit", str(parse_size("300KB").to_bytes(1500))])
    mtu: int = 1500

    def build(self) -> None:
        for node in ("s1", "s2", "r", "d"):
            sh("ip", "netns", "add", ns(node))
            nsx(node, "ip", "link", "set", "lo", "up")
        for i, h in enumerate(("s1", "s2", "d"), start=1):
            a, b = f"{h}-r", f"r-{h}"
            sh("ip", "link", "add", f"{PREFIX}x{i}", "type", "veth", "peer", "name", f"{PREFIX}y{i}")
            sh("ip", "link", "set", f"{PREFIX}x{i}", "netns", ns(h), "name", a)
            sh("ip", "link", "set", f"{PREFIX}y{i}", "netns", ns("r"), "name", b)
            for node, dev, addr in ((h, a, f"10.103.{i}.1/24"), ("r", b, f"10.103.{i}.254/24")):
                nsx(node, "ip", "link", "set", dev, "mtu", str(self.mtu), "gso_max_segs", "1", "up")
                nsx(node, "ip", "addr", "add", addr, "dev", dev)
            nsx(h, "ip", "route", "add", "default", "via", f"10.103.{i}.254")
        nsx("r", "sysctl", "-qw", "net.ipv4.ip_forward=1")
        node, dev = BOTTLENECK
        nsx(node, "tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
        nsx(
            node,
            "tc",
            "class",
            "add",
            "dev",
            dev,
            "parent",
            "1:",
            "classid",
            "1:1",
            "htb",
            "rate",
            self.rate,
            "ceil",
            self.rate,
            "quantum",
            "1514",
        )
        nsx(node, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *self.leaf)
        nsx("s1", "ping", "-c1", "-W2", HOSTS["d"])
        nsx("s2", "ping", "-c1", "-W2", HOSTS["d"])

    def destroy(self) -> None:
        for node in ("s1", "s2", "r", "d"):
            sh("ip", "netns", "del", ns(node), check=False)


def leaf_stats() -> dict:
    node, dev = BOTTLENECK
    for q in json.loads(nsx(node, "tc", "-s", "-j", "qdisc", "show", "dev", dev).stdout):
        if q.get("handle") == "10:":
            return q
    raise RuntimeError("leaf qdisc 10: not found")


class QueueSampler(threading.Thread):
    """Poll the bottleneck leaf's backlog with `tc -s -j` (about 100-200 Hz; the real sampler is elsewhere)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int]] = []
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            q = leaf_stats()
            self.samples.append((time.time(), int(q.get("backlog", 0))))
            time.sleep(0.004)

    def stop(self) -> list[int]:
        self._stop_evt.set()
        self.join(5)
        return [b for _, b in self.samples]


def netstat(node: str) -> dict[str, int]:
    """Counters of /proc/net/netstat inside a namespace: 'TcpExt.TCPDeliveredCE', 'IpExt.InCEPkts', ..."""
    lines = nsx(node, "cat", "/proc/net/netstat").stdout.splitlines()
    out: dict[str, int] = {}
    for head, vals in zip(lines[::2], lines[1::2], strict=True):
        group, *names = head.split()
        for n, v in zip(names, vals.split()[1:], strict=True):
            out[f"{group.rstrip(':')}.{n}"] = int(v)
    return out


def iperf_pair(seconds: float, omit: float = 1.0, extra: list[str] | None = None) -> list[dict]:
    """One iperf3 flow from each sender to d, simultaneously; returns both JSON results."""
    servers = [
        subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{ns('d')}", "iperf3", "-s", "-1", "-p", str(p)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for p in (5201, 5202)
    ]
    try:
        for p in (5201, 5202):
            wait_listening(ns("d"), p)
        clients = [
            subprocess.Popen(
                [
                    "nsenter",
                    f"--net=/run/netns/{ns(h)}",
                    "iperf3",
                    "-c",
                    HOSTS["d"],
                    "-p",
                    str(p),
                    "-t",
                    str(seconds),
                    "-O",
                    str(omit),
                    "-J",
                    *(extra or []),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for h, p in (("s1", 5201), ("s2", 5202))
        ]
        outs = [c.communicate(timeout=seconds + 30) for c in clients]
        for c, (o, e) in zip(clients, outs, strict=True):
            assert c.returncode == 0, o[-400:] + e
        return [json.loads(o) for o, _ in outs]
    finally:
        for s in servers:
            s.kill()
            s.wait()


def capture(node: str, dev: str, pcap: Path, count: int, timeout: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "nsenter",
            f"--net=/run/netns/{ns(node)}",
            "timeout",
            str(timeout),
            "tcpdump",
            "-i",
            dev,
            "-s",
            "96",
            "-c",
            str(count),
            "-w",
            str(pcap),
            "-U",
            "ip",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def percentile(xs: list[int], q: float) -> float:
    s = sorted(xs)
    return float(s[min(len(s) - 1, int(q / 100 * len(s)))]) if s else float("nan")


class SenderSampler(threading.Thread):
    """Poll the senders' data connections with `ss -tin` (~30 Hz): (time, host, cwnd, ssthresh or None).

    ss prints ssthresh only below 0xFFFF, so None means "at least 65535" (huge or infinite)."""

    def __init__(self, hosts: tuple[str, ...] = ("s1", "s2"), min_acked: int = 1_000_000) -> None:
        super().__init__(daemon=True)
        self.hosts, self.min_acked = hosts, min_acked
        self.rows: list[tuple[float, str, int, int | None]] = []
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            for h in self.hosts:
                for line in nsx(h, "ss", "-tinHO", "dst", HOSTS["d"], check=False).stdout.splitlines():
                    cw, acked = re.search(r"\bcwnd:(\d+)", line), re.search(r"bytes_acked:(\d+)", line)
                    if cw and acked and int(acked.group(1)) >= self.min_acked:  # data connections only
                        ss = re.search(r"(?<![_a-z])ssthresh:(\d+)", line)
                        self.rows.append((time.time(), h, int(cw.group(1)), int(ss.group(1)) if ss else None))
            time.sleep(0.03)

    def stop(self) -> list[tuple[float, str, int, int | None]]:
        self._stop_evt.set()
        self.join(5)
        return self.rows
