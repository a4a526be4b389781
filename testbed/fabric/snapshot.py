"""A built fabric's configuration as the manifest records it: each namespace's sysctls that shape its traffic
(``sysctl_values``, with the root namespace's congestion controls) and `tc -s qdisc show` of every node
(``tc_text``), read before traffic starts and, for tc, again at the run's end."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed.fabric.build import Fabric

SYSCTLS = [
    "net.ipv4.tcp_ecn",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.fib_multipath_hash_policy",
    "net.ipv4.fib_multipath_hash_fields",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.ip_local_port_range",
]
ROOT_SYSCTLS = ("net.ipv4.tcp_allowed_congestion_control", "net.ipv4.tcp_congestion_control")


def tc_text(fab: Fabric) -> dict[str, str]:
    """`tc -s qdisc show` of every router and host namespace."""
    out = {}
    for node in fab.topo.nodes:
        cp = subprocess.run(["tc", "-n", fab.netns(node), "-s", "qdisc", "show"], capture_output=True, text=True)
        out[node] = cp.stdout
    return out


def sysctl_values(fab: Fabric) -> dict[str, dict[str, str]]:
    """node -> ``SYSCTLS`` as its namespace has them, and ``root`` -> the root namespace's congestion controls."""
    out: dict[str, dict[str, str]] = {}
    for node in fab.topo.nodes:
        cp = subprocess.run(
            ["ip", "netns", "exec", fab.netns(node), "sysctl", *SYSCTLS], capture_output=True, text=True
        )
        out[node] = parse_sysctl(cp.stdout)
    out["root"] = {k: Path("/proc/sys", *k.split(".")).read_text().strip() for k in ROOT_SYSCTLS}
    return out


def parse_sysctl(text: str) -> dict[str, str]:
    """``sysctl``'s ``key = value`` lines as a mapping (a line without `` = ``, e.g. an error, is left out)."""
    return dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)
