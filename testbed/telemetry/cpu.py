"""Whole-machine CPU use from /proc/stat -> cpu.csv rows ``(t, cpu, busy)``.

``busy`` = 1 - (idle + iowait) / total over the interval since the previous sample, per core and ``all``.
By default this runs inside the queue sampler process (``cpu_hz``, 10 Hz): that process already keeps a timed
loop, one /proc/stat read costs tens of microseconds, and the harness process is spared a thread competing for
its GIL. ``CpuThread`` is the alternative for a harness that runs no queue sampler.
"""

from __future__ import annotations

import csv
import threading
import time
from pathlib import Path

CPU_HEADER = ("t", "cpu", "busy")


def parse_proc_stat(text: str) -> dict[str, tuple[int, int]]:
    """/proc/stat text -> {"all" | "0" | "1" ...: (busy jiffies, total jiffies)}.

    total = user+nice+system+idle+iowait+irq+softirq+steal (guest time is already inside user/nice).
    """
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        parts = line.split()
        label = "all" if parts[0] == "cpu" else parts[0][3:]
        vals = [int(x) for x in parts[1:9]]
        vals += [0] * (8 - len(vals))
        total = sum(vals)
        idle = vals[3] + vals[4]
        out[label] = (total - idle, total)
    if "all" not in out:
        raise ValueError("no aggregate 'cpu' line in /proc/stat text")
    return out


def busy_fractions(prev: dict[str, tuple[int, int]], cur: dict[str, tuple[int, int]]) -> dict[str, float]:
    """Busy fraction 0..1 per cpu between two parsed samples (cpus missing from either are skipped)."""
    out: dict[str, float] = {}
    for label, (busy, total) in cur.items():
        if label not in prev:
            continue
        db, dt = busy - prev[label][0], total - prev[label][1]
        out[label] = min(1.0, max(0.0, db / dt)) if dt > 0 else 0.0
    return out


class CpuSampler:
    """Call ``sample()`` periodically; each call after the first returns rows for the interval just ended."""

    def __init__(self, path: str = "/proc/stat"):
        self.path = path
        self._prev: dict[str, tuple[int, int]] | None = None

    def _read(self) -> dict[str, tuple[int, int]]:
        with open(self.path) as fh:
            return parse_proc_stat(fh.read())

    def sample(self, now: float | None = None) -> list[tuple[float, str, float]]:
        cur = self._read()
        t = time.time() if now is None else now
        prev, self._prev = self._prev, cur
        if prev is None:
            return []
        fr = busy_fractions(prev, cur)
        order = ["all", *sorted((k for k in fr if k != "all"), key=int)]
        return [(t, k, round(fr[k], 4)) for k in order if k in fr]


class CpuThread:
    """A daemon thread writing cpu.csv every ``interval`` s until ``stop()`` (which flushes and joins)."""

    def __init__(self, out_csv: Path, interval: float = 0.1):
        self.out_csv = Path(out_csv)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self.rows = 0

    def start(self) -> CpuThread:
        self._thread.start()
        return self

    def _run(self) -> None:
        sampler = CpuSampler()
        with open(self.out_csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(CPU_HEADER)
            sampler.sample()
            nxt = time.monotonic()
            while not self._stop.is_set():
                nxt += self.interval
                self._stop.wait(max(0.0, nxt - time.monotonic()))
                rows = sampler.sample()
                w.writerows(rows)
                self.rows += len(rows)
                fh.flush()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            raise TimeoutError("cpu sampler thread did not stop within 5 s")
        return self.rows
