"""Waiting on conditions, for the tests and the benchmarks: poll a predicate with a timeout instead of sleeping a
guessed time.

A fixed sleep is either too short on a slow or busy machine (the test fails for no reason: a child had not yet
installed its signal handler, iperf3 -s was not yet listening) or longer than needed everywhere else. Waiting on the
condition itself is as fast as the machine allows and fails with a message naming what never happened.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    pred: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.01,
    describe: Callable[[], str] | None = None,
) -> T:
    """Call ``pred`` every ``interval`` s until it returns a truthy value, and return that value.

    Raises ``TimeoutError("timed out after N s waiting for <what>")`` when ``timeout`` s pass first; ``describe``,
    if given, is called then and its text (the state that was seen last) is appended. ``pred`` is always called
    at least once, and once more at the deadline, so a condition that holds at once costs no wait.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f" ({describe()})" if describe is not None else ""
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(interval)


def listening(netns: str, port: int) -> bool:
    """True when a TCP socket listens on ``port`` in the named network namespace ``netns`` (via ``ss -ltnH``)."""
    out = subprocess.run(
        ["ip", "netns", "exec", netns, "ss", "-ltnH", f"sport = :{port}"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    ).stdout
    return bool(out.strip())


def wait_listening(netns: str, port: int = 5201, timeout: float = 10.0) -> None:
    """Wait until a server (e.g. ``iperf3 -s``) listens on TCP ``port`` in ``netns``; TimeoutError names both."""
    wait_until(lambda: listening(netns, port), timeout, f"a TCP listener on port {port} in netns {netns}", 0.02)
