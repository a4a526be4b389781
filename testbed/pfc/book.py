"""Which upstream ports are paused, and for which queues: the controller's bookkeeping, apart from the kernel.

An upstream port pauses when the first queue it fed crosses XOFF and resumes when the last such queue is back under
XON (a port can feed two congested queues of one router). Each pause is kept as a row of pauses.csv.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PortPauses:
    holders: set[int] = field(default_factory=set)  # queue ids holding the port paused
    start: float | None = None  # wall time the current pause took effect
    rows: list[dict[str, Any]] = field(default_factory=list)


class PauseBook:
    def __init__(self, ports: int):
        self.ports = [PortPauses() for _ in range(ports)]

    def hold(self, port: int, queue: int) -> bool:
        """Queue ``queue`` holds ``port`` paused; True when the port must pause now (it was running)."""
        p = self.ports[port]
        was = bool(p.holders)
        p.holders.add(queue)
        return not was

    def release(self, queue: int) -> list[int]:
        """Queue ``queue`` is under XON: the ports it alone held, which must resume now."""
        out = []
        for i, p in enumerate(self.ports):
            if queue in p.holders:
                p.holders.discard(queue)
                if not p.holders:
                    out.append(i)
        return out

    def paused(self, port: int, at: float, row: dict[str, Any]) -> None:
        """The port's pause took effect at wall time ``at``; ``row`` is its pauses.csv row so far."""
        p = self.ports[port]
        p.start = at
        p.rows.append({**row, "t_start": round(at, 6)})

    def resumed(self, port: int, at: float) -> None:
        p = self.ports[port]
        if p.start is not None:
            p.rows[-1]["t_end"] = round(at, 6)
            p.rows[-1]["duration_s"] = round(at - p.start, 6)
        p.start = None

    def still_paused(self) -> list[int]:
        return [i for i, p in enumerate(self.ports) if p.start is not None]

    def end(self, at: float) -> list[dict[str, Any]]:
        """Close every pause still open at ``at``; every pause's row."""
        for i in self.still_paused():
            self.ports[i].holders.clear()
            self.resumed(i, at)
        return [r for p in self.ports for r in p.rows]
