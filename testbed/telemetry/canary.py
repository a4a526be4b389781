"""Machine stalls as a process of the run: one canary thread pinned to each CPU, asleep between ticks.

    /usr/bin/python3 -m testbed.telemetry.canary --config CONFIG.json --out DIR

A guest's vCPU can stop for a while (the hypervisor preempts it, or the host faults in guest memory). Nothing
that runs on that CPU runs meanwhile, neither processes nor the softirqs that forward packets, and a sampler on
the other CPU sees nothing wrong. Each canary thread wakes every ``period_s`` on its own CPU and compares how late
it woke with how long the kernel says it waited to run (its schedstat run delay): waiting for the CPU is
contention, which the CPU figures already show; lateness the run delay does not explain is time the CPU itself
did not run. Each such stall over ``min_stall_s`` is a row of DIR/cpu_stalls.csv; DIR/canary_health.json holds
the ticks, the totals per CPU and the canary's own CPU. DIR/canary.ready exists once every thread is pinned.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.host.child import ChildHandle, StopFlag, child_main, start_child, stop_on_signals
from testbed.host.procs import ProcessGroup
from testbed.spec.schemas import SCHEMAS

COLUMNS = SCHEMAS["cpu_stalls"][0]


class CanaryError(RuntimeError):
    """The canary could not start, or stopped without its result."""


@dataclass(frozen=True)
class CanaryConfig:
    """Tick period and the least unexplained lateness recorded as a stall (seconds)."""

    period_s: float = 0.01
    min_stall_s: float = 0.01
    cpus: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def load(cls, path: Path) -> CanaryConfig:
        d = json.loads(path.read_text())
        return cls(float(d["period_s"]), float(d["min_stall_s"]), tuple(int(c) for c in d["cpus"]))


def unexplained(late_s: float, waited_s: float) -> float:
    """Lateness of a wake-up that waiting for the CPU does not explain (never negative)."""
    return max(0.0, late_s - waited_s)


def steal_s(stat: str, cpus: tuple[int, ...], hz: float) -> dict[int, float]:
    """Each CPU's steal time in seconds from /proc/stat's text: the time the hypervisor ran something else while
    this vCPU wanted to run (the eighth value of a ``cpuN`` line, in clock ticks). An empty mapping when the kernel
    does not count it (fewer fields)."""
    out: dict[int, float] = {}
    for line in stat.splitlines():
        head, *vals = line.split()
        if head.startswith("cpu") and head[3:].isdigit() and int(head[3:]) in cpus and len(vals) >= 8:
            out[int(head[3:])] = int(vals[7]) / hz
    return out


def _run_delay_s(fd: int) -> float:
    """A thread's total time spent runnable but not running: its schedstat's second field (ns), read with one
    pread on a descriptor kept open (an open and a close per tick would double the canary's cost)."""
    return int(os.pread(fd, 128, 0).split()[1]) / 1e9


class Canary:
    """One pinned thread per CPU; ``rows`` holds the stalls, ``ticks`` the wake-ups per CPU."""

    def __init__(self, cfg: CanaryConfig, stop: StopFlag | threading.Event):
        self.cfg, self.stop = cfg, stop
        self.cpus = cfg.cpus or tuple(sorted(os.sched_getaffinity(0)))
        self.rows: list[dict[str, Any]] = []
        self.ticks: dict[int, int] = {}
        self.ready = threading.Barrier(len(self.cpus) + 1)
        self.lock = threading.Lock()

    def _tick_loop(self, cpu: int) -> None:
        os.sched_setaffinity(0, {cpu})
        fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        self.ready.wait()
        period, floor = self.cfg.period_s, self.cfg.min_stall_s
        ticks, due, waited0 = 0, time.monotonic() + period, _run_delay_s(fd)
        while not self.stop.is_set():
            time.sleep(max(0.0, due - time.monotonic()))
            woke = time.monotonic()
            waited1 = _run_delay_s(fd)
            late = woke - due
            lost = unexplained(late, waited1 - waited0)
            if lost >= floor:
                with self.lock:
                    row = {"t": time.time() - late, "cpu": cpu, "late_s": late, "waited_s": waited1 - waited0}
                    self.rows.append({**row, "stalled_s": lost})
            ticks += 1
            waited0 = waited1
            due = max(due + period, woke)  # after a stall, tick on from now: no catch-up burst
        os.close(fd)
        self.ticks[cpu] = ticks

    def run(self, ready_file: Path) -> float:
        threads = [threading.Thread(target=self._tick_loop, args=(c,), daemon=True) for c in self.cpus]
        for t in threads:
            t.start()
        self.ready.wait()
        ready_file.touch()
        t0 = time.monotonic()
        while not self.stop.wait(0.2):  # a signal may land on a canary thread: the main thread looks for its flag
            continue
        for t in threads:
            t.join(5.0)
        return time.monotonic() - t0


def health(
    rows: list[dict[str, Any]],
    ticks: dict[int, int],
    cpu_s: float,
    wall_s: float,
    cfg: CanaryConfig,
    steal: dict[int, float] | None = None,
) -> dict:
    """The manifest's ``machine_stalls``: per CPU its stalls, their total and longest, the steal time the kernel
    counted over the canary's life (``steal_s``, absent where the kernel counts none), and the canary's cost."""
    per: dict[str, dict[str, Any]] = {}
    for cpu, n in sorted(ticks.items()):
        mine = [r["stalled_s"] for r in rows if r["cpu"] == cpu]
        per[str(cpu)] = {"ticks": n, "stalls": len(mine), "stalled_s": sum(mine), "max_s": max(mine, default=0.0)}
        if steal is not None and cpu in steal:
            per[str(cpu)]["steal_s"] = steal[cpu]
    return {
        "period_s": cfg.period_s,
        "min_stall_s": cfg.min_stall_s,
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "per_cpu": per,
        "stalls": len(rows),
        "max_stall_s": max((r["stalled_s"] for r in rows), default=0.0),
    }


def run(cfg: CanaryConfig, out: Path, stop: StopFlag | threading.Event) -> dict[str, Any]:
    canary = Canary(cfg, stop)
    hz = float(os.sysconf("SC_CLK_TCK"))
    steal0 = steal_s(Path("/proc/stat").read_text(), canary.cpus, hz)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    wall = canary.run(out / "canary.ready")
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    steal1 = steal_s(Path("/proc/stat").read_text(), canary.cpus, hz)
    steal = {c: round(steal1[c] - steal0[c], 6) for c in steal1 if c in steal0}  # whole ticks, as /proc/stat counts
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    with open(out / "cpu_stalls.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(sorted(canary.rows, key=lambda r: r["t"]))
    h = health(canary.rows, canary.ticks, cpu, wall, cfg, steal)
    (out / "canary_health.json").write_text(json.dumps(h, indent=1) + "\n")
    return h


def start_canary(procs: ProcessGroup, cfg: CanaryConfig, out: Path, ready_timeout: float = 10.0) -> ChildHandle:
    """Write DIR/canary_config.json, spawn the canary in ``procs``, wait until every thread is pinned."""
    config = out / "canary_config.json"
    config.write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
    proc = start_child(procs, "telemetry-canary", "testbed.telemetry.canary", config, out, out / "canary.ready",
                       out / "canary.log", CanaryError, ready_timeout)  # fmt: skip
    return ChildHandle(proc, out / "canary_health.json", CanaryError, timeout=10.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m testbed.telemetry.canary", description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = CanaryConfig.load(args.config)
    if (args.out / "cpu_stalls.csv").exists():
        print(f"canary: {args.out}/cpu_stalls.csv exists: a run record is never overwritten", file=sys.stderr)
        return 2
    run(cfg, args.out, stop_on_signals())
    return 0


if __name__ == "__main__":
    child_main("canary", main)
