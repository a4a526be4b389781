"""Guest capability check: does this kernel have kernel RED with ECN, netem, fq_codel and DCTCP?

Run inside the guest as ``/usr/bin/python3 -m testbed.vm.check`` (or ``python3 -m testbed vm --check``). Uses
ip/tc by subprocess, not pyroute2 (importing pyroute2 takes seconds in the guest: docs/bench.md). Every trial is made on
a veth device in a scratch namespace that is deleted afterwards. Exit 0 only if everything works.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from collections.abc import Sequence

from testbed.host.trials import RED_ECN_TRIAL

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
QDISCS: dict[str, tuple[Sequence[str], str]] = {  # name -> (tc args, word that `tc qdisc show` must print)
    "red+ecn": (RED_ECN_TRIAL, "ecn"),
    "netem": (["netem", "delay", "1ms"], "delay 1ms"),
    "fq_codel": (["fq_codel"], "fq_codel"),
}
MODULES = ("veth", "sch_red", "sch_netem", "tcp_dctcp")  # fq_codel is built into Debian's kernel


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=False)


def check_qdiscs(netns: str) -> dict[str, str]:
    """name -> "ok" or the error, each tried as the root qdisc of a veth device in ``netns``."""
    out: dict[str, str] = {}
    made = _run("ip", "-n", netns, "link", "add", "tbvm0", "type", "veth", "peer", "name", "tbvm1")
    if made.returncode != 0:
        return {name: f"untested: cannot create a veth pair: {made.stderr.strip()}" for name in QDISCS}
    _run("ip", "-n", netns, "link", "set", "tbvm0", "up")
    for name, (args, word) in QDISCS.items():
        _run("ip", "netns", "exec", netns, "tc", "qdisc", "del", "dev", "tbvm0", "root")  # a kind change needs del
        res = _run(
            "ip", "netns", "exec", netns, "tc", "qdisc", "replace", "dev", "tbvm0", "root", "handle", "1:", *args
        )
        shown = _run("ip", "netns", "exec", netns, "tc", "qdisc", "show", "dev", "tbvm0").stdout
        if res.returncode != 0:
            out[name] = "missing: " + (res.stderr.strip().splitlines() or ["tc failed"])[0]
        elif word not in shown:
            out[name] = f"missing: tc accepted it but shows {shown.strip()!r}"
        else:
            out[name] = "ok"
    return out


def check_dctcp() -> str:
    """DCTCP set per socket (root may pick any loaded congestion control) and read back."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, b"dctcp")
        except OSError as e:
            return f"missing: setsockopt TCP_CONGESTION dctcp: {e.strerror}"
        got = s.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).rstrip(b"\0").decode()
    return "ok" if got == "dctcp" else f"missing: socket reports {got}"


def main() -> int:
    for mod in MODULES:
        _run("modprobe", mod)
    netns = f"tbvmchk{os.getpid()}"
    res = _run("ip", "netns", "add", netns)
    if res.returncode != 0:
        print(f"cannot create scratch namespace {netns}: {res.stderr.strip()}", file=sys.stderr)
        return 2
    try:
        results = check_qdiscs(netns)
    finally:
        _run("ip", "netns", "del", netns)
    results["tcp_dctcp"] = check_dctcp()
    print(f"kernel {platform.release()}")
    for name, status in results.items():
        print(f"  {name:10s} {status}")
    return 0 if all(v == "ok" for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
