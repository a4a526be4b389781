"""Tiny namespace topologies for the telemetry root tests and benchmark (not the fabric builder).

``line_net``: PREFIX-snd -> PREFIX-rtr -> PREFIX-rcv, the router's egress towards the receiver shaped with
htb 1: (class 1:1 at ``rate``) + bfifo 10: (``limit`` bytes). ``scale_net``: N namespaces PREFIX-bI with P
shaped veth ports each (both veth ends in the same namespace), the sampler's load of a ~10-router run.
Both are context managers that delete every namespace they made, even on failure.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from testbed.host.procs import run_checked
from testbed.telemetry.ports import PortRef


@dataclass(frozen=True)
class LineNet:
    snd: str
    rtr: str
    rcv: str
    rcv_ip: str
    port: PortRef


def _shape(ns: str, dev: str, rate: str, limit: int) -> None:
    run_checked(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"])
    run_checked(
        [
            "tc",
            "-n",
            ns,
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
            rate,
            "ceil",
            rate,
        ]
    )
    run_checked(
        ["tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "bfifo", "limit", str(limit)]
    )


def _delete(names: list[str]) -> None:
    for ns in reversed(names):
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def _add_ns(ns: str, made: list[str]) -> None:
    run_checked(["ip", "netns", "add", ns])
    made.append(ns)
    # IPv6 off, as in the fabric: its link-local chatter (MLD reports, router solicitations) goes through the shaped
    # queue for seconds after link-up and moves the counters a test compares with tc's
    sysctls = ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]
    run_checked(["ip", "netns", "exec", ns, "sysctl", "-qw", *sysctls])
    run_checked(["ip", "-n", ns, "link", "set", "lo", "up"])


@contextmanager
def line_net(prefix: str = "tbd4", rate: str = "100mbit", limit: int = 300000, mtu: int = 1500) -> Iterator[LineNet]:
    snd, rtr, rcv = f"{prefix}-snd", f"{prefix}-rtr", f"{prefix}-rcv"
    made: list[str] = []
    try:
        for ns in (snd, rtr, rcv):
            _add_ns(ns, made)
        # veth pairs: snd:s0 <-> rtr:r0 (10.77.1.0/24), rtr:r1 <-> rcv:c0 (10.77.2.0/24)
        run_checked(["ip", "-n", snd, "link", "add", "s0", "type", "veth", "peer", "name", "r0", "netns", rtr])
        run_checked(["ip", "-n", rtr, "link", "add", "r1", "type", "veth", "peer", "name", "c0", "netns", rcv])
        for ns, dev, addr in (
            (snd, "s0", "10.77.1.1/24"),
            (rtr, "r0", "10.77.1.2/24"),
            (rtr, "r1", "10.77.2.1/24"),
            (rcv, "c0", "10.77.2.2/24"),
        ):
            run_checked(["ip", "-n", ns, "link", "set", dev, "mtu", str(mtu), "up"])
            run_checked(["ip", "-n", ns, "addr", "add", addr, "dev", dev])
        for ns, dev in ((snd, "s0"), (rcv, "c0")):  # packet-level queues (GSO super-packets otherwise)
            run_checked(["ip", "-n", ns, "link", "set", "dev", dev, "gso_max_segs", "1"])
        run_checked(["ip", "-n", snd, "route", "add", "default", "via", "10.77.1.2"])
        run_checked(["ip", "-n", rcv, "route", "add", "default", "via", "10.77.2.1"])
        run_checked(["ip", "netns", "exec", rtr, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        _shape(rtr, "r1", rate, limit)
        yield LineNet(snd, rtr, rcv, "10.77.2.2", PortRef(netns=rtr, dev="r1", leaf="10:", root="1:", node="rtr"))
    finally:
        _delete(made)


@contextmanager
def scale_net(
    prefix: str = "tbd4", namespaces: int = 10, ports: int = 4, rate: str = "100mbit", limit: int = 300000
) -> Iterator[list[PortRef]]:
    made: list[str] = []
    refs: list[PortRef] = []
    try:
        for i in range(namespaces):
            ns = f"{prefix}-b{i}"
            _add_ns(ns, made)
            for p in range(ports):
                run_checked(["ip", "-n", ns, "link", "add", f"p{p}a", "type", "veth", "peer", "name", f"p{p}b"])
                for end in ("a", "b"):
                    run_checked(["ip", "-n", ns, "link", "set", f"p{p}{end}", "up"])
                _shape(ns, f"p{p}a", rate, limit)
                refs.append(PortRef(netns=ns, dev=f"p{p}a", leaf="10:", root="1:", node=f"b{i}"))
        yield refs
    finally:
        _delete(made)
