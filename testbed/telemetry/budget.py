"""The CPU budget of a run's traffic window: what the harness cost beside what the emulation cost.

``CpuBudget.start(procs)`` at the start of the traffic and ``.stop(procs)`` at its end give the manifest's
``cpu_budget``: the machine's busy core-seconds by /proc/stat category over the window, and each owned process's
CPU in the window (from /proc while it runs, from wait4 once it exited), summed by role. The harness's share is
the user time of its processes (Python workers, iperf3, probes) plus all of the queue sampler's time (its
system time is netlink dumps) plus the main process; the rest of the busy time is the emulation itself: the
kernel forwarding packets through veths, routers and qdiscs, in softirq or in a sender's system call.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Protocol

from testbed.host.procs import CLK_TCK

STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
ROLES = ("sampler", "qtelem", "workers", "iperf3", "probes", "scapy", "main", "other")


class _Proc(Protocol):
    name: str
    argv: list[str]
    pid: int

    def cpu_times(self) -> tuple[float, float] | None: ...


def role_of(name: str, argv: list[str]) -> str:
    """The harness role of an owned process, from its name and command line (after ``ip netns exec NS``)."""
    if name == "telemetry-sampler":
        return "sampler"
    if name == "telemetry-qslots":
        return "qtelem"  # the kernel telemetry's reader; its programs' time is kernel time (emulation)
    args = list(argv)
    if len(args) > 3 and PurePath(args[0]).name == "ip" and args[1:3] == ["netns", "exec"]:
        args = args[4:]
    exe = PurePath(args[0]).name if args else ""
    module = args[args.index("-m") + 1] if "-m" in args[:-1] else ""
    if exe == "iperf3" or (exe == "sh" and any("iperf3" in a for a in args[1:3])):
        return "iperf3"  # the client runs under a shell loop (traffic/iperf.py), which reaps it
    if module == "traffic.worker":
        return "workers"
    if module == "traffic.flowtools":
        return "probes"
    if module == "traffic.scapy_train":
        return "scapy"
    if module == "testbed.telemetry.sampler":
        return "sampler"
    return "other"


def read_proc_stat(path: str = "/proc/stat") -> dict[str, float]:
    """The aggregate ``cpu`` line of /proc/stat in core-seconds per category."""
    with open(path) as fh:
        for line in fh:
            if line.startswith("cpu "):
                vals = [int(x) for x in line.split()[1:9]]
                vals += [0] * (len(STAT_FIELDS) - len(vals))
                return {k: v / CLK_TCK for k, v in zip(STAT_FIELDS, vals)}
    raise ValueError(f"no aggregate cpu line in {path}")


@dataclass
class CpuBudget:
    """Snapshots at the start and the end of the traffic window; ``stop`` returns the manifest's ``cpu_budget``."""

    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    _t0: float = 0.0
    _stat0: dict[str, float] = field(default_factory=dict)
    _self0: tuple[float, float] = (0.0, 0.0)
    _procs0: dict[int, tuple[float, float]] = field(default_factory=dict)

    def start(self, procs: Iterable[_Proc]) -> None:
        self._t0 = time.monotonic()
        self._stat0 = read_proc_stat()
        t = os.times()
        self._self0 = (t.user, t.system)
        self._procs0 = {p.pid: c for p in procs if (c := p.cpu_times()) is not None}

    def stop(self, procs: Iterable[_Proc]) -> dict[str, Any]:
        window = time.monotonic() - self._t0
        stat1 = read_proc_stat()
        t = os.times()
        per_role: dict[str, dict[str, float]] = defaultdict(lambda: {"user_s": 0.0, "system_s": 0.0})
        per_role["main"] = {"user_s": t.user - self._self0[0], "system_s": t.system - self._self0[1]}
        processes = []
        for p in procs:
            now = p.cpu_times()
            if now is None:
                continue
            before = self._procs0.get(p.pid, (0.0, 0.0))
            user, system = max(0.0, now[0] - before[0]), max(0.0, now[1] - before[1])
            role = role_of(p.name, p.argv)
            per_role[role]["user_s"] += user
            per_role[role]["system_s"] += system
            processes.append({"name": p.name, "role": role, "user_s": round(user, 3), "system_s": round(system, 3)})
        return summarize_budget(window, self.cores, self._stat0, stat1, dict(per_role), processes)


def harness_seconds(role: str, user_s: float, system_s: float) -> float:
    """The part of a role's CPU that is the harness's own: all of it for the sampler and the main process (their
    system calls are measurement), the user part for traffic processes (their system time is the kernel sending)."""
    return user_s + system_s if role in ("sampler", "main") else user_s


def summarize_budget(
    window_s: float,
    cores: int,
    stat0: dict[str, float],
    stat1: dict[str, float],
    per_role: dict[str, dict[str, float]],
    processes: list[dict[str, Any]],
) -> dict[str, Any]:
    """Pure: the ``cpu_budget`` dict from two /proc/stat readings and the per-role CPU in the window."""
    delta = {k: max(0.0, stat1.get(k, 0.0) - stat0.get(k, 0.0)) for k in STAT_FIELDS}
    capacity = window_s * cores
    busy = sum(v for k, v in delta.items() if k not in ("idle", "iowait"))
    harness = {r: round(harness_seconds(r, v["user_s"], v["system_s"]), 3) for r, v in per_role.items()}
    harness_s = sum(harness.values())

    def share(x: float) -> float | None:
        return round(x / capacity, 4) if capacity > 0 else None

    return {
        "window_s": round(window_s, 3),
        "cores": cores,
        "machine": {k: round(v, 3) for k, v in delta.items()},
        "busy_core_s": round(busy, 3),
        "busy_share": share(busy),
        "harness_core_s": round(harness_s, 3),
        "harness_share": share(harness_s),
        "emulation_core_s": round(max(0.0, busy - harness_s), 3),
        "emulation_share": share(max(0.0, busy - harness_s)),
        "harness_by_role": dict(sorted(harness.items())),
        "by_role": {r: {k: round(v, 3) for k, v in d.items()} for r, d in sorted(per_role.items())},
        "processes": processes,
        "definition": (
            "harness = the queue sampler and the main process in full, plus the user time of traffic processes; "
            "emulation = the rest of the machine's busy time (the kernel forwarding, in softirq or in a sender's "
            "system call); over the traffic window"
        ),
    }
