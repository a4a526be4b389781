"""The RTT probe against ``ping -i 0.01`` across a standing queue (root): the probe keeps its schedule and reads what
ping reads.

Topology (tests/root/ecn_net.py): s1, s2 -> r -> d; r's egress to d is 50 Mbit/s (htb) with a 300 KB bfifo, MTU
1500, gso_max_segs 1. One bulk TCP flow s1 -> d (iperf3, cubic) has its congestion window clamped to ``CWND``
segments by s1's route (``cwnd lock``), below the buffer: it keeps about 288 KB standing in the queue without a drop,
so everything to d waits about 46 ms there. From s2, across that queue, for the same ``SLOTS`` x 10 ms: the probe
over TCP (the default), the probe over UDP, and ping. Each probe's p99 must be within 5% of ping's, with one
rtt.csv row per slot.

Run as: ``flock /tmp/tb-emulation.lock /usr/bin/python3 -m pytest tests/root/test_probe_vs_ping.py -q -s``.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from testbed.host.capabilities import Capabilities
from testbed.host.procs import ProcessGroup
from testbed.host.waiting import wait_listening, wait_until
from testbed.spec.topology import HostInfo
from testbed.spec.workload import parse_workload
from tests.root import ecn_net as en
from traffic.base import RunContext
from traffic.placement import SourcePorts
from traffic.workload import run_workload

pytestmark = [
    pytest.mark.root,
    pytest.mark.bench,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc)"),
]

INTERVAL = 0.01
SLOTS = 1000
CWND = 190  # segments of 1514 bytes in the queue: 287,660 of the bfifo's 300,000
STANDING = 250_000  # bytes: the queue counts as standing from here
TOLERANCE = 0.05


@pytest.fixture
def net() -> Iterator[en.Net]:
    """The topology, under the machine's run lock (no other fabric measures on these cores meanwhile)."""
    from testbed.host.ownership import RunLock

    with RunLock(wait=1800):
        n = en.Net(rate="50mbit", leaf=["bfifo", "limit", "300000"])
        try:
            n.build()
            yield n
        finally:
            n.destroy()


def _ns_popen(node: str, *argv: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(["nsenter", f"--net=/run/netns/{en.ns(node)}", *argv], text=True, **kw)


def _bulk_cwnd() -> list[int]:
    out = en.nsx("s1", "ss", "-tinH", "dst", en.HOSTS["d"], check=False).stdout
    return [int(c) for c in re.findall(r"\bcwnd:(\d+)", out)]


def _metrics() -> str:
    return en.nsx("s1", "ip", "tcp_metrics", "show", en.HOSTS["d"], check=False).stdout.strip()


def ping_rtts(text: str) -> dict[int, float]:
    """icmp_seq -> round trip (s) of ping's replies (duplicates ignored)."""
    out: dict[int, float] = {}
    for m in re.finditer(r"icmp_seq=(\d+) .*?time=([\d.]+) ms(?! \(DUP)", text):
        out.setdefault(int(m[1]), float(m[2]) / 1e3)
    return out


def p99_with_losses(answered: list[float], lost: int) -> float:
    """The summary's p99 (results/metrics/__init__.py rtt): over every probe sent, a lost one an infinite round trip."""
    return float(np.percentile(np.array(answered + [np.inf] * lost), 99))


def test_probe_p99_matches_ping_across_a_standing_queue(net: en.Net, tmp_path: Path) -> None:
    en.nsx("s1", "ip", "route", "change", "default", "via", "10.103.1.254", "cwnd", "lock", str(CWND))
    server = _ns_popen("d", "iperf3", "-s", "-p", "5201", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = None
    try:
        wait_listening(en.ns("d"), 5201)
        # the kernel clamps a connection's cwnd to a locked route cwnd through its TCP metrics entry for the
        # destination, which a connection makes when it closes cleanly: one short connection first (to a listener
        # that sends nothing: unread data at the close would reset it, and a reset saves no metrics)
        d = en.HOSTS["d"]
        listen = f"import socket; c, _ = socket.create_server(({d!r}, 5300)).accept(); c.recv(1); c.close()"
        warm = _ns_popen("d", "/usr/bin/python3", "-c", listen)
        wait_listening(en.ns("d"), 5300)
        en.nsx("s1", "/usr/bin/python3", "-c", f"import socket; socket.create_connection(({d!r}, 5300), 5).close()")
        warm.wait(timeout=10)
        wait_until(_metrics, 5, "s1's TCP metrics entry for d", 0.05)
        seconds = int(SLOTS * INTERVAL) + 20
        client = _ns_popen(
            "s1", "iperf3", "-c", en.HOSTS["d"], "-p", "5201", "-t", str(seconds), "-C", "cubic",
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        wait_until(
            lambda: en.leaf_stats().get("backlog", 0) >= STANDING,
            20,
            f"a standing queue of {STANDING} bytes",
            0.05,
            lambda: f"backlog {en.leaf_stats().get('backlog')}, drops {en.leaf_stats().get('drops')}",
        )
        assert max(_bulk_cwnd()) <= CWND, f"cwnd not clamped: {_bulk_cwnd()} ({_metrics()})"
        drops0 = int(en.leaf_stats()["drops"])
        hosts = {h: HostInfo(h, ip, "l1", en.ns(h)) for h, ip in en.HOSTS.items()}
        duration = SLOTS * INTERVAL
        jobs = [
            {"kind": "rtt_probe", "name": "tcp", "pairs": [["s2", "d"]], "interval": INTERVAL, "duration": duration,
             "cc": "cubic"},
            {"kind": "rtt_probe", "name": "udp", "pairs": [["s2", "d"]], "interval": INTERVAL, "duration": duration,
             "proto": "udp"},
        ]  # fmt: skip
        pings: list[subprocess.Popen[str]] = []
        ping_out = tmp_path / "ping.txt"

        def start_ping(_go: float) -> None:  # at the go time, beside the probes; its lines go to a file, not a pipe
            argv = ["ping", "-n", "-i", str(INTERVAL), "-c", str(SLOTS), "-W", "2", en.HOSTS["d"]]
            with open(ping_out, "w") as fh:
                pings.append(_ns_popen("s2", *argv, stdout=fh, stderr=subprocess.STDOUT))

        with ProcessGroup() as pg:
            ctx = RunContext(hosts, pg, tmp_path, go_file=tmp_path / "go", ports=SourcePorts(seed=1))
            tables = run_workload(parse_workload(jobs), ctx, Capabilities(), 120, on_go=start_ping)
        cwnd = _bulk_cwnd()
        backlog = int(en.leaf_stats()["backlog"])
        drops = int(en.leaf_stats()["drops"]) - drops0
        pings[0].wait(timeout=60)
        out = ping_out.read_text()
        assert pings[0].returncode in (0, 1), out[-400:]  # 1: some reply missing, judged below
    finally:
        for p in (client, server):
            if p is not None:
                p.kill()
                p.wait()

    ping = ping_rtts(out)
    ping_p99 = float(np.percentile(list(ping.values()), 99))
    figures = [
        f"ping: {len(ping)}/{SLOTS} answered, p50 {np.median(list(ping.values())) * 1e3:.2f} ms, "
        f"p99 {ping_p99 * 1e3:.2f} ms; queue {backlog} B after, {drops} drops, bulk cwnd {cwnd}"
    ]
    p99 = {}
    for job in ("tcp", "udp"):
        rows = [r for r in tables["rtt"] if r["job"] == job]
        answered = [r["rtt_s"] for r in rows if r["rtt_s"] is not None]
        lost = len(rows) - len(answered)
        p99[job] = p99_with_losses(answered, lost)
        late = max(r["send_late_s"] for r in rows)
        figures.append(
            f"{job}: {len(rows)} rows, {lost} lost, p50 {np.median(answered) * 1e3:.2f} ms, p99 {p99[job] * 1e3:.2f}"
            f" ms ({p99[job] / ping_p99 - 1:+.1%} of ping's), send late at most {late * 1e3:.2f} ms"
        )
        assert [r["seq"] for r in rows] == list(range(SLOTS)), f"{job}: a slot skipped or repeated"
    print("\n" + "\n".join(figures))
    assert drops == 0 and backlog >= STANDING, "the queue did not stand without drops: " + figures[0]
    assert len(ping) >= 0.99 * SLOTS, figures[0]
    for job in ("tcp", "udp"):
        assert p99[job] == pytest.approx(ping_p99, rel=TOLERANCE), "\n".join(figures)
