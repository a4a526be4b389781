"""What the root tests share: a harness run to its end or to kill, its staged rows, processes in other namespaces."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def procs_in_other_netns() -> list[int]:
    """Pids (sorted) of every process whose network namespace is not this process's."""
    root = os.readlink("/proc/self/ns/net")
    out = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(p / "ns" / "net") != root:
                out.append(int(p.name))
        except OSError:  # the process ended meanwhile
            pass
    return sorted(out)


@contextmanager
def harness_run(scenario: Path, out: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`testbed run SCENARIO` as a child; SIGKILLed when the block ends (it is never let finish), and reaped."""
    harness = subprocess.Popen(
        [sys.executable, "-m", "testbed", "run", str(scenario), "-o", str(out), "--no-report", "--wait", "300"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield harness
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait(10)


def staged_rows(pid: int) -> int:
    """Rows the harness ``pid`` has flushed into its sampler stage's queues.csv (0 when none yet)."""
    return sum(f.read_bytes().count(b"\n") for f in Path("/dev/shm").glob(f"tbstage-{pid}-*/queues.csv"))


def run_one(scenario: Path, out: Path, timeout: float = 300) -> Path:
    """`testbed run SCENARIO -o OUT --no-report` to its end; the one record it wrote (the output tails if it failed)."""
    cp = subprocess.run(
        ["/usr/bin/python3", "-m", "testbed", "run", str(scenario), "-o", str(out), "--no-report"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    (run,) = [p.parent for p in out.glob("*/manifest.json")]
    return run
