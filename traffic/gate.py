"""The start gate: every traffic process sets up first, and traffic starts at one go time for all of them.

Python start-up, imports and connection set-up of a dozen processes take a core-second at the start of a run;
inside the measured window that saturates both cores for most of a second. So the harness spawns every process,
waits until each gated one has said it is ready (its ready file exists), then writes the go time to the run's go
file; each process sleeps until go + its job's ``start_after`` and only then sends. The measured window starts
at the go time.

Processes learn the gate from their environment; without it (a generator run on its own) they start at once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

GO_ENV = "TESTBED_GO"  # the run's go file: one line, the epoch time traffic starts
READY_ENV = "TESTBED_READY"  # the file this process creates once it is set up
AFTER_ENV = "TESTBED_START_AFTER"  # seconds after the go time this process's job starts
POLL_S = 0.005


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def ready_then_wait(timeout: float = 120.0) -> float:
    """Say this process is set up, wait for the go time, sleep until go + start_after; return that time.

    Raises TimeoutError when no go time comes within ``timeout`` s. Without a gate in the environment: now."""
    go_file, ready = os.environ.get(GO_ENV), os.environ.get(READY_ENV)
    if not go_file:
        return time.time()
    if ready:
        write_atomic(Path(ready), f"{os.getpid()}\n")
    deadline = time.monotonic() + timeout
    while True:
        try:
            go = float(Path(go_file).read_text())
            break
        except (FileNotFoundError, ValueError):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no go time in {go_file} within {timeout:g} s") from None
            time.sleep(POLL_S)
    start = go + float(os.environ.get(AFTER_ENV) or 0.0)
    delay = start - time.time()
    if delay > 0:
        time.sleep(delay)
    return start


def gate_env(go_file: Path, ready: Path | None, start_after: float) -> dict[str, str]:
    """The environment that puts a process behind the gate (``ready`` None: it waits but is not waited for)."""
    env = {GO_ENV: str(go_file), AFTER_ENV: f"{start_after:g}"}
    if ready is not None:
        env[READY_ENV] = str(ready)
    return env
