"""Connecting to a server the job's other end starts at about the same time: retried until it listens."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

RETRY_S = 0.05


def connect_retrying(make: Callable[[], socket.socket], addr: tuple[str, int], deadline: float) -> socket.socket:
    """A fresh socket from ``make`` connected to ``addr``, a new one every RETRY_S until the server listens; the
    last error is raised once ``deadline`` (wall clock) has passed."""
    while True:
        s = make()
        s.settimeout(2.0)
        try:
            s.connect(addr)
            return s
        except OSError:
            s.close()
            if time.time() > deadline:
                raise
            time.sleep(RETRY_S)  # the server is not listening yet: nothing to wait on but time
