"""The capability probe: what this machine can do, found by trying it in a scratch namespace (never by reading
version numbers). Returns a ``testbed.host.capabilities.Capabilities``.

The trials of layers above the host (the ECN marking and DCTCP implementations) come in as ``netns_trials`` and
run in the same scratch namespace: ``testbed.fabric.probe.probe`` is the whole probe.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from testbed.host import mininet_compat
from testbed.host.capabilities import Capabilities
from testbed.host.trials import QDISC_TRIALS

# a trial in the scratch namespace: it adds its keys to the results, given the namespace's name
NetnsTrial = Callable[[dict[str, Any], str], None]


def _run(argv: list[str], timeout: float = 5) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _probe_netns(results: dict[str, Any], trials: Sequence[NetnsTrial]) -> None:
    ns = f"tbprobe{os.getpid()}"
    if _run(["ip", "netns", "add", ns]).returncode != 0:
        results["netns"] = False
        return
    results["netns"] = True
    try:
        _run(["ip", "-n", ns, "link", "add", "pa", "type", "veth", "peer", "name", "pb"])
        for name, args in QDISC_TRIALS.items():
            parent = [] if name == "clsact" else ["root"]
            cp = _run(["tc", "-n", ns, "qdisc", "add", "dev", "pa", *parent, *args])
            parent = ["clsact"] if name == "clsact" else parent
            results[f"qdisc.{name}"] = cp.returncode == 0
            _run(["tc", "-n", ns, "qdisc", "del", "dev", "pa", *parent])
        results["ifb"] = _run(["ip", "-n", ns, "link", "add", "ifbprobe", "type", "ifb"]).returncode == 0
        sysctl = ["ip", "netns", "exec", ns, "sysctl", "-n"]
        results["ecmp.hash_policy_3"] = (
            _run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.fib_multipath_hash_policy=3"]).returncode
            == 0
            and _run([*sysctl, "net.ipv4.fib_multipath_hash_fields"]).returncode == 0
        )
        results["ecmp.hash_seed"] = _run([*sysctl, "net.ipv4.fib_multipath_hash_seed"]).returncode == 0
        nft = shutil.which("nft")
        if nft:
            script = (
                "table inet tbprobe {\n chain c {\n  type filter hook postrouting priority 0; policy accept;\n"
                "  numgen random mod 100 < 1 counter drop\n }\n}\n"
            )
            cp = subprocess.run(
                ["ip", "netns", "exec", ns, nft, "-f", "-"], input=script, capture_output=True, text=True
            )
            results["nftables"] = cp.returncode == 0
        else:
            results["nftables"] = False
        for trial in trials:
            trial(results, ns)
    finally:
        _run(["ip", "netns", "delete", ns])


def _cc(results: dict[str, Any]) -> None:
    avail = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    results["cc.available"] = avail
    results["cc.allowed"] = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().split()
    results["cc.default"] = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    for cc in ("reno", "cubic", "bbr", "dctcp"):
        if cc in avail:
            results[f"cc.{cc}"] = True
        else:  # a loadable module counts: `modprobe -n` checks without loading
            results[f"cc.{cc}"] = (
                shutil.which("modprobe") is not None and _run(["modprobe", "-n", f"tcp_{cc}"]).returncode == 0
            )


def _mininet(results: dict[str, Any]) -> None:
    try:
        mininet_compat.import_mininet()
        results["mininet"] = shutil.which("mnexec") is not None
    except ImportError:
        results["mininet"] = False


def probe(netns_trials: Sequence[NetnsTrial] = ()) -> Capabilities:
    """Try every capability of the host, and ``netns_trials`` in the scratch namespace. Needs root for the
    namespace trials (without it they stay unknown)."""
    results: dict[str, Any] = {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "root": os.geteuid() == 0,
    }
    if results["root"]:
        _probe_netns(results, netns_trials)
    _cc(results)
    _mininet(results)
    results["btf"] = Path("/sys/kernel/btf/vmlinux").exists()
    results["ovs"] = Path("/sys/module/openvswitch").exists() or (
        shutil.which("modprobe") is not None and _run(["modprobe", "-n", "openvswitch"]).returncode == 0
    )
    for tool in ("clang", "bpftool", "iperf3", "tcpdump", "tc", "ip", "nft", "ethtool"):
        results[f"tool.{tool}"] = shutil.which(tool) is not None
    return Capabilities.from_dict(results)
