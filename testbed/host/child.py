"""A run's helper process (the kernel queue telemetry's reader, the PFC controller): ``python3 -m MODULE --config
F --out DIR`` in the run's process group, ready when it writes its ready file; stopped with SIGINT, after which
its result is a JSON file it writes on the way out. ``child_main`` is every child's ``__main__``, and
``stop_on_signals`` its stop request."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

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


POLL_S = 0.02  # how often StopFlag.wait looks at its flag: a child stops within this of its signal


class StopFlag:
    """A stop request that a signal handler may raise: ``set``, ``is_set`` and ``wait`` take no lock.

    A Python signal handler runs in the main thread between two bytecodes, also while that thread holds a lock. A
    handler calling ``threading.Event.set`` while the main thread is inside ``Event.wait`` (which holds the Event's
    lock around its bookkeeping) waits for that lock, held by the thread it interrupted: the child never stops.
    So the flag is a plain attribute, and ``wait`` polls it."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Sleep until the flag is set or ``timeout`` seconds pass; the flag."""
        deadline = time.monotonic() + timeout
        while not self._set:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, POLL_S))
        return self._set


def stop_on_signals() -> StopFlag:
    """A StopFlag raised by SIGINT (how ``stop_child`` stops a child) or SIGTERM."""
    stop = StopFlag()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def child_main(name: str, main: Callable[[], int]) -> NoReturn:
    """Every child process's ``__main__``: exit with ``main()``'s status; 0 when its owner's SIGINT came before the
    child took the signal over (a normal end); 2 and one line ``NAME: Error: why`` on stderr for any error."""
    try:
        code = main()
    except KeyboardInterrupt:
        code = 0
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        code = 2
    sys.exit(code)
