"""What this machine can do, found by trying it in a scratch namespace (never by reading version numbers).

``probe()`` returns a plain dict (stored in every run manifest); ``doctor_rows()`` turns it into the table
``python3 -m testbed doctor`` prints: each capability, whether it is there, what its absence disables, and how
to get it on Debian/Ubuntu. ``calibration`` is this machine's CPU cost calibration (``testbed calibrate``: its
values and date, ``stale`` when measured on another kernel or CPU, or ``not calibrated``).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError

QDISC_TRIALS: dict[str, list[str]] = {
    "htb": ["htb", "default", "1"],
    "tbf": ["tbf", "rate", "1mbit", "burst", "10kb", "latency", "10ms"],
    "bfifo": ["bfifo", "limit", "100000"],
    "pfifo": ["pfifo", "limit", "100"],
    "red": [
        "red",
        "limit",
        "400000",
        "min",
        "30000",
        "max",
        "90000",
        "avpkt",
        "1500",
        "burst",
        "21",
        "probability",
        "0.1",
        "bandwidth",
        "100mbit",
        "ecn",
    ],
    "netem": ["netem", "delay", "1ms"],
    "fq_codel": ["fq_codel"],
    "clsact": ["clsact"],
}


@dataclass(frozen=True)
class Need:
    key: str
    what: str
    disables: str
    get: str


NEEDS = [
    Need("qdisc.htb", "HTB qdisc", "rate shaping (nothing can run)", "any stock Debian/Ubuntu kernel has sch_htb"),
    Need("qdisc.bfifo", "bfifo/pfifo qdiscs", "buffer depth (nothing can run)", "stock kernels have them"),
    Need(
        "qdisc.red",
        "sch_red (RED with ECN)",
        "kernel ECN marking: the eBPF marker is used instead",
        "stock kernel (linux-image-amd64), or `python3 -m testbed vm`",
    ),
    Need(
        "qdisc.netem",
        "sch_netem",
        "link delay: scenarios with `delay` fail or skip",
        "stock kernel, or `python3 -m testbed vm`",
    ),
    Need("qdisc.fq_codel", "sch_fq_codel", "nothing here (informational)", "stock kernel"),
    Need("qdisc.clsact", "clsact qdisc", "the eBPF ECN marker", "stock kernels have it"),
    Need("ifb", "ifb devices", "link delay (netem on the receiving side)", "stock kernels have it"),
    Need("cc.cubic", "TCP cubic", "cubic flows", "stock kernels have tcp_cubic"),
    Need(
        "cc.dctcp",
        "TCP DCTCP (kernel module)",
        "kernel DCTCP: the BPF struct_ops DCTCP is used instead",
        "stock kernel (modprobe tcp_dctcp), or `python3 -m testbed vm`",
    ),
    Need(
        "ecmp.hash_policy_3", "ECMP hash policy 3 with hash fields", "deterministic ECMP hashing", "Linux 5.12 or newer"
    ),
    Need(
        "ecmp.hash_seed",
        "fib_multipath_hash_seed sysctl",
        "ecmp.seed (hash seed must be left unset)",
        "Linux 6.11 or newer",
    ),
    Need("nftables", "nftables (numgen random)", "random loss (`loss`) on links", "apt install nftables"),
    Need("tool.clang", "clang", "building the eBPF marker and BPF DCTCP", "apt install clang llvm"),
    Need("tool.bpftool", "bpftool", "loading BPF DCTCP (struct_ops)", "apt install bpftool"),
    Need("btf", "kernel BTF (/sys/kernel/btf/vmlinux)", "the eBPF programs (CO-RE)", "stock kernels ship it"),
    Need(
        "ovs",
        "Open vSwitch kernel datapath",
        "nothing (the fabric is routed L3; informational)",
        "apt install openvswitch-switch on a stock kernel",
    ),
    Need("tool.iperf3", "iperf3", "iperf3 background load", "apt install iperf3"),
    Need("tool.tcpdump", "tcpdump", "packet captures", "apt install tcpdump"),
    Need(
        "mininet",
        "Mininet (Python module + mnexec)",
        "building fabrics (nothing can run)",
        "apt install mininet (Debian's, for /usr/bin/python3)",
    ),
]


def _run(argv: list[str], timeout: float = 5) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _probe_netns(results: dict[str, Any]) -> None:
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
        _probe_ecn(results, ns)
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
        from testbed import mininet_compat

        mininet_compat.import_mininet()
        results["mininet"] = shutil.which("mnexec") is not None
    except ImportError:
        results["mininet"] = False


def probe() -> dict[str, Any]:
    """Try every capability; returns {key: bool or value}. Needs root for the namespace trials."""
    results: dict[str, Any] = {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "root": os.geteuid() == 0,
    }
    if results["root"]:
        _probe_netns(results)
    _cc(results)
    _mininet(results)
    results["btf"] = Path("/sys/kernel/btf/vmlinux").exists()
    results["ovs"] = Path("/sys/module/openvswitch").exists() or (
        shutil.which("modprobe") is not None and _run(["modprobe", "-n", "openvswitch"]).returncode == 0
    )
    for tool in ("clang", "bpftool", "iperf3", "tcpdump", "tc", "ip", "nft", "ethtool"):
        results[f"tool.{tool}"] = shutil.which(tool) is not None
    results["calibration"] = _calibration()
    return results


def _calibration() -> dict[str, Any]:
    """This machine's CPU cost calibration (``testbed calibrate``): its values and date, or why there is none."""
    try:
        from testbed import calibrate
    except ImportError as exc:
        return {"status": "unknown", "error": f"testbed.calibrate failed to import: {exc}"}
    return calibrate.status()


def _probe_ecn(results: dict[str, Any], netns: str) -> None:
    """Which ECN marking and DCTCP implementations this machine will use (testbed.ecn decides)."""
    try:
        from testbed import ecn
    except ImportError as exc:
        results["ecn"] = {"marking_auto": None, "error": f"testbed.ecn failed to import: {exc}"}
        return
    results["ecn"] = ecn.probe(netns)


def doctor_rows(caps: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(capability, status, what its absence disables, how to get it)."""
    rows = []
    for need in NEEDS:
        ok = caps.get(need.key)
        status = "yes" if ok else ("unknown" if ok is None else "MISSING")
        rows.append((need.what, status, "" if ok else need.disables, "" if ok else need.get))
    ecn = caps.get("ecn") or {}
    rows.append(
        ("ECN marking implementation (auto)", str(ecn.get("marking_auto")), ecn.get("sch_red_reason") or "", "")
    )
    rows.append(("DCTCP implementation", str(ecn.get("dctcp")), ecn.get("dctcp_reason") or "", ""))
    if ecn.get("error"):
        rows.append(("testbed.ecn", "MISSING", ecn["error"], "see the error"))
    if "calibration" in caps:
        from testbed.calibrate import describe_status

        rows.append(("CPU cost calibration", *describe_status(caps["calibration"] or {})))
    return rows


def stock_missing(caps: dict[str, Any]) -> list[str]:
    """What this kernel lacks of the stock-kernel paths (kernel RED, netem, the tcp_dctcp module); empty on a stock
    Debian/Ubuntu kernel, where the ``stock_kernel`` scenarios run natively instead of in the guest kernel mode."""
    have = {
        "sch_red": bool(caps.get("qdisc.red")),
        "sch_netem": bool(caps.get("qdisc.netem")),
        "tcp_dctcp": (caps.get("ecn") or {}).get("dctcp") == "kernel",
    }
    return [name for name, ok in have.items() if not ok]


def require(caps: dict[str, Any], key: str, why: str) -> None:
    """Raise a CapabilityError naming what is missing, what needed it and how to get it."""
    if caps.get(key):
        return
    need = next((n for n in NEEDS if n.key == key), None)
    how = f" ({need.get})" if need else ""
    raise CapabilityError(f"{why} needs {need.what if need else key}, which this machine lacks{how}")


class CapabilityError(TestbedError, RuntimeError):
    """A scenario asks for something this kernel or machine cannot do."""
