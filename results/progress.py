"""A small progress display for runs and sweeps: what runs now, elapsed time, estimated time left.

On a TTY one status line is redrawn in place (at most ``refresh`` times a second); otherwise (a log, CI) each
event is one plain line and ``tick`` prints at most every ``plain_every`` seconds. The estimate uses the
expected duration of each run when given (the scenario's duration) and otherwise the mean of finished runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def _hms(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        tty: bool | None = None,
        refresh: float = 0.5,
        plain_every: float = 30.0,
    ):
        self.total = total
        self.stream = stream or sys.stdout
        self.clock = clock
        self.tty = self.stream.isatty() if tty is None else tty
        self.refresh, self.plain_every = refresh, plain_every
        self.started = clock()
        self.done = 0
        self.durations: list[float] = []
        self.current: str | None = None
        self.current_start = 0.0
        self.current_expected: float | None = None
        self.remaining_expected: list[float | None] = []
        self._last_draw = -1e9

    def plan(self, expected: list[float | None]) -> None:
        """Expected seconds of each run still to come (in order), for the estimate."""
        self.remaining_expected = list(expected)

    def eta(self) -> float | None:
        """Seconds left: the current run's remainder plus the runs still to start."""
        mean = sum(self.durations) / len(self.durations) if self.durations else None
        left = 0.0
        if self.current is not None:
            exp = self.current_expected or mean
            if exp is None:
                return None
            left += max(0.0, exp - (self.clock() - self.current_start))
        queued = self.total - self.done - (1 if self.current else 0)
        planned = self.remaining_expected[:queued]
        for e in planned + [None] * (queued - len(planned)):
            e = e if e is not None else mean
            if e is None:
                return None
            left += e
        return left

    def line(self) -> str:
        now = self.clock()
        eta = self.eta()
        cur = f"{self.current} ({_hms(now - self.current_start)})" if self.current else "idle"
        return (
            f"[{self.done}/{self.total}] {cur} | elapsed {_hms(now - self.started)} | "
            f"left {'?' if eta is None else '~' + _hms(eta)}"
        )

    def _emit(self, text: str, final: bool = False) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._last_draw = self.clock()

    def start(self, label: str, expected_s: float | None = None) -> None:
        if self.remaining_expected:
            planned = self.remaining_expected.pop(0)
            expected_s = expected_s if expected_s is not None else planned
        self.current, self.current_start, self.current_expected = label, self.clock(), expected_s
        self._emit(f"start {label}: " + self.line() if not self.tty else self.line())

    def tick(self) -> None:
        gap = self.refresh if self.tty else self.plain_every
        if self.clock() - self._last_draw >= gap:
            self._emit(self.line())

    def finish(self, status: str = "complete") -> None:
        if self.current is None:
            raise RuntimeError("finish() without start()")
        took = self.clock() - self.current_start
        self.durations.append(took)
        label, self.current = self.current, None
        self.done += 1
        self._emit(f"{label}: {status} in {_hms(took)} | " + self.line(), final=True)

    def close(self) -> None:
        self._emit(f"done {self.done}/{self.total} in {_hms(self.clock() - self.started)}", final=True)
