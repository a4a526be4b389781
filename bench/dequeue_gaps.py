"""The direct fidelity check's reading of one busy port, with and without real-time CPU hogs on every core.

    flock /run/tb-dev-emulation.lock /usr/bin/python3 -m bench.dequeue_gaps [--rate 100mbit] [--seconds 4]

A line (bench.benchnet.line_net: snd -> rtr -> rcv, MTU 1500, rtr's egress shaped with htb at ``--rate``) carries
two iperf3 cubic flows for ``--seconds``; the kernel queue telemetry counts the dequeue gaps at the shaped port.
The second take starts a SCHED_FIFO busy loop pinned to each core 1 s in, for half the flows' time. Each take
prints the port's spread (results.fidelity.gaps.port_gaps): gaps counted while the queue stayed busy, the share
late by a frame time (counted in the kernel), and bounds on the late p50/p99 (from the histogram).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

from bench.benchnet import line_net
from results.fidelity.gaps import port_gaps
from testbed.host.procs import ProcessGroup
from testbed.host.waiting import wait_listening, wait_until
from testbed.spec.units import parse_rate
from testbed.telemetry.qslots import port_totals
from testbed.telemetry.qtelem import QtPort, QueueTelemetry

HOG = "import time, sys\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def take(net: Any, rate_bps: float, seconds: float, hog_s: float) -> dict[str, Any] | None:
    """One take: the port's gap spread (None when the queue never stayed busy)."""
    with (
        ProcessGroup() as procs,
        QueueTelemetry([QtPort(net.rtr, "r1", rate_bps, "rtr", mtu=1500)], slot_ns=100_000) as qt,
    ):
        procs.spawn("iperf3-s", ["iperf3", "-s", "-1"], netns=net.rcv)
        wait_listening(net.rcv, 5201)
        cli = procs.spawn("iperf3-c", ["iperf3", "-c", net.rcv_ip, "-t", f"{seconds:g}", "-P", "2"], netns=net.snd)
        hogs = []
        if hog_s > 0:
            wait_until(lambda: int(qt.state["deq_seen"][0]) > 0, 10, "the flows to start")
            time.sleep(1.0)  # a benchmark's schedule: the hogs start into steady traffic
            for core in range(os.cpu_count() or 1):
                argv = ["chrt", "-f", "50", "taskset", "-c", str(core), sys.executable, "-c", HOG, f"{hog_s:g}"]
                hogs.append(subprocess.Popen(argv))
        wait_until(lambda: cli.poll() is not None, seconds + 30, "iperf3 -c to finish", interval=0.1)
        for h in hogs:
            h.wait(hog_s + 10)
        qt.detach()
        return port_gaps(port_totals(qt.totals()[0], qt.ports[0]), rate_bps, 1500)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", default="100mbit")
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args(argv)
    rate_bps = parse_rate(args.rate)
    with line_net("tbgap", rate=args.rate, limit=300000, mtu=1500) as net:
        for label, hog_s in (("idle", 0.0), ("RT hogs", args.seconds / 2)):
            g = take(net, rate_bps, args.seconds, hog_s)
            if g is None:
                print(f"{label}: the queue never stayed busy: no gap counted")
                continue
            print(
                f"{label}: {g['gaps']} gaps, {g['late_share']:.3%} late by >= {g['late_edge_us']:.0f} us "
                f"(frame {g['frame_us']:.1f} us), {g['early_share']:.1%} early, late p50 <= "
                f"{g['late_p50_us_at_most']:g} us, p99 <= {g['late_p99_us_at_most']:g} us, mean |dev| "
                f"{g['mean_abs_us']:.1f} us"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
