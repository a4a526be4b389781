"""A run's helper process (the kernel queue telemetry's reader, the PFC controller): ``python3 -m MODULE --config
F --out DIR`` in the run's process group, ready when it writes its ready file; stopped with SIGINT, after which
its result is a JSON file it writes on the way out."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from testbed.host.procs import Proc, ProcessGroup

PYTHON = "/usr/bin/python3"  # Debian's, where apt's python3-* packages are
REPO = Path(__file__).resolve().parents[2]


def start_child(
    procs: ProcessGroup,
    name: str,
    module: str,
    config: Path,
    out: Path,
    ready: Path,
    log: Path,
    error: type[Exception],
    timeout: float = 20.0,
) -> Proc:
    """Spawn ``module`` with ``config`` and ``out`` (its stderr to ``log``) and wait for ``ready``; ``error``
    says why not (it exited first, or was not ready within ``timeout`` and was stopped)."""
    argv = [PYTHON if Path(PYTHON).exists() else sys.executable, "-m", module, "--config", str(config)]
    proc = procs.spawn(name, [*argv, "--out", str(out)], stderr=log, cwd=REPO)
    deadline = time.monotonic() + timeout
    while not ready.exists():  # a child's readiness: no condition to wait on but the file
        if proc.poll() is not None:
            raise error(f"{name} exited {proc.poll()} before it was ready: {proc.stderr_tail(5)}")
        if time.monotonic() > deadline:
            proc.stop(grace=0.5)
            raise error(f"{name} was not ready within {timeout:g} s: {proc.stderr_tail(5)}")
        time.sleep(0.01)
    return proc


def stop_child(proc: Proc, result: Path, error: type[Exception], timeout: float = 30.0) -> dict[str, Any]:
    """SIGINT the child, wait for it (killed after ``timeout``: ``error``), and read the JSON it wrote."""
    if proc.poll() is None:
        proc.signal_group(signal.SIGINT)
        try:
            proc.wait(timeout)
        except TimeoutError:
            proc.stop(grace=1.0)
            raise error(f"{proc.name} (pid {proc.pid}) did not stop within {timeout:g} s; killed") from None
    try:
        return dict(json.loads(result.read_text()))
    except (OSError, json.JSONDecodeError) as exc:
        raise error(f"{proc.name} exited {proc.poll()} without {result.name} ({exc}): {proc.stderr_tail(5)}") from None


class ChildHandle:
    """A running child: ``stop()`` signals it, waits for it, and returns the JSON it wrote to ``result`` (read once:
    a second stop returns the same)."""

    def __init__(self, proc: Proc, result: Path, error: type[Exception], timeout: float = 30.0):
        self.proc, self.result, self.error, self.timeout = proc, result, error, timeout
        self._result: dict[str, Any] | None = None

    def stop(self, timeout: float | None = None) -> dict[str, Any]:
        if self._result is None:
            self._result = stop_child(self.proc, self.result, self.error, self.timeout if timeout is None else timeout)
        return dict(self._result)
