"""The machine's CPU over a window, as the calibration counts it (``CpuWindow``), and waiting for it to go quiet.

Busy core-seconds are ``cores x wall - (idle + iowait + steal)``: this kernel counts busy time by ticks, which miss
short periodic bursts such as the sampler's, while it measures idle time exactly (NO_HZ); steal is the hypervisor
running another guest. The CPU of processes that are not the calibration's (other users of a shared machine) is
counted apart (/proc/PID/stat).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from testbed.host.procs import CLK_TCK
from testbed.telemetry.budget import read_proc_stat

PF_KTHREAD = 0x00200000  # task flag of kernel threads (/proc/PID/stat field 9)


def _idle_s() -> float:
    """Idle + iowait + steal seconds summed over CPUs (/proc/stat: idle is exact under NO_HZ, unlike its
    tick-counted busy time; steal is the hypervisor running someone else)."""
    stat = read_proc_stat()
    return stat["idle"] + stat["iowait"] + stat["steal"]


def _procs() -> dict[int, tuple[int, int, float]]:
    """Every process: pid -> (ppid, flags, user + system CPU seconds)."""
    out: dict[int, tuple[int, int, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        f = text[text.rfind(")") + 2 :].split()  # fields from 3 (state) on
        out[int(d)] = (int(f[1]), int(f[6]), (int(f[11]) + int(f[12])) / CLK_TCK)
    return out


def _foreign(procs: dict[int, tuple[int, int, float]], me: int) -> dict[int, float]:
    """CPU seconds of user-space processes that are not this process or its descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    ours, todo = set(), [me]
    while todo:
        pid = todo.pop()
        if pid not in ours:
            ours.add(pid)
            todo += children.get(pid, [])
    return {pid: cpu for pid, (_, flags, cpu) in procs.items() if pid not in ours and not flags & PF_KTHREAD}


@dataclass
class CpuWindow:
    """The machine's CPU over a window: busy core-seconds (from exact idle time) and other processes' share."""

    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    wall_s: float = 0.0
    busy_core_s: float = 0.0
    foreign_core_s: float = 0.0
    _t0: float = 0.0
    _idle0: float = 0.0
    _foreign0: dict[int, float] = field(default_factory=dict)

    def start(self) -> None:
        self._foreign0 = _foreign(_procs(), os.getpid())
        self._t0, self._idle0 = time.monotonic(), _idle_s()

    def stop(self) -> CpuWindow:
        t1, idle1 = time.monotonic(), _idle_s()
        foreign1 = _foreign(_procs(), os.getpid())
        self.wall_s = t1 - self._t0
        self.busy_core_s = max(0.0, self.cores * self.wall_s - (idle1 - self._idle0))
        # a process that started in the window counts in full; one that ended in it is not seen (a lower bound)
        self.foreign_core_s = sum(max(0.0, cpu - self._foreign0.get(pid, 0.0)) for pid, cpu in foreign1.items())
        return self

    @property
    def ours_core_s(self) -> float:
        return max(0.0, self.busy_core_s - self.foreign_core_s)


def settle(max_s: float = 8.0, window_s: float = 0.3, idle_share: float = 0.1) -> float:
    """Wait until this machine's CPU, other processes' apart, is quiet (namespaces of a torn-down fabric are freed
    by kernel workers after teardown returns). Returns the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        w = CpuWindow()
        w.start()
        time.sleep(window_s)
        w.stop()
        if w.ours_core_s < idle_share * w.cores * w.wall_s:
            break
    return time.monotonic() - t0
