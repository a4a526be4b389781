"""A run's child processes stop on SIGINT wherever the signal lands: ``StopFlag`` takes no lock in the handler.

A CI pass lost a run to a canary that never stopped: its handler called ``threading.Event.set`` while the main
thread sat inside ``Event.wait``'s lock. The probe here delivers SIGINT at the n-th traced line of a child's wait,
for each n in turn; the same probe on ``threading.Event`` hangs, which shows that it reaches the locked lines.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.host.child import StopFlag
from testbed.host.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
LINES = 12  # more traced lines than one pass of StopFlag.wait's loop or threading.Event.wait has

PROBE = """
import os, signal, sys, threading
from testbed.host.child import stop_on_signals
kind, n = sys.argv[1], int(sys.argv[2])
if kind == "event":
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
else:
    stop = stop_on_signals()
count = 0
def tracer(frame, event, arg):
    global count
    if event == "line":
        if count == n:
            os.kill(os.getpid(), signal.SIGINT)
        count += 1
    return tracer
sys.settrace(tracer)
got = stop.wait(30.0)
sys.settrace(None)
print(got)
"""


def _probe(kind: str, n: int, timeout: float) -> str | None:
    """The probe's output, or None when it did not finish within ``timeout`` (killed)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, kind, str(n)], cwd=REPO, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return None
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_signal_on_any_line_of_the_wait_stops_it() -> None:
    for n in range(LINES):
        assert _probe("flag", n, timeout=20.0) == "True", f"SIGINT at traced line {n} did not stop the wait"


def test_the_probe_reaches_a_lock_the_handler_would_need() -> None:
    """The control: with threading.Event some line is inside the Event's lock, and the handler waits forever."""
    assert any(_probe("event", n, timeout=3.0) is None for n in range(LINES))


def test_stop_flag_wait_returns_at_its_timeout_and_at_once_when_set() -> None:
    flag = StopFlag()
    t0 = time.monotonic()
    assert flag.wait(0.05) is False
    assert time.monotonic() - t0 >= 0.05
    flag.set()
    assert flag.is_set() and flag.wait(10.0) is True


@pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="no schedstat: the canary cannot run here")
def test_the_canary_child_stops_on_sigint_and_writes_its_health(tmp_path: Path) -> None:
    (tmp_path / "cfg.json").write_text(json.dumps({"period_s": 0.01, "min_stall_s": 0.01, "cpus": []}))
    argv = [sys.executable, "-m", "testbed.telemetry.canary", "--config", str(tmp_path / "cfg.json")]
    proc = subprocess.Popen([*argv, "--out", str(tmp_path)], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        ready = tmp_path / "canary.ready"  # the child's readiness is this file
        wait_until(lambda: ready.exists() or proc.poll() is not None, 20.0, "the canary's ready file")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20.0) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    health = json.loads((tmp_path / "canary_health.json").read_text())
    assert health["per_cpu"] and all(c["ticks"] > 0 for c in health["per_cpu"].values())
