"""The TCP latency probe keeps its schedule (traffic.flowtools.probe): an answer later than the next slot skips the
slots that passed instead of sending them back-to-back (which measured an idle path at 30 us each in a QoS run)."""

from __future__ import annotations

import io
import itertools
import json
import socket
import threading
import time

from traffic.flowtools import PROBE, probe
from traffic.gate import GO_ENV


def _slow_echo(lst: socket.socket, delay_s: float, stop: threading.Event) -> None:
    conn, _ = lst.accept()
    conn.settimeout(0.2)
    while not stop.is_set():
        try:
            data = conn.recv(PROBE.size)
        except TimeoutError:
            continue
        if not data:
            break
        time.sleep(delay_s)
        conn.sendall(data)
    conn.close()


def test_a_late_answer_skips_the_slots_that_passed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(GO_ENV, raising=False)  # no gate: the probe starts at once
    lst = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    server = threading.Thread(target=_slow_echo, args=(lst, 0.025, stop), daemon=True)
    server.start()
    cfg = {"size": PROBE.size, "interval": 0.01, "duration": 0.3, "proto": "tcp", "dst_ip": "127.0.0.1"}
    out = io.StringIO()
    try:
        probe({**cfg, "port": lst.getsockname()[1]}, out)
    finally:
        stop.set()
        lst.close()
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    seqs = [r["seq"] for r in rows]
    gaps = [b["t_send"] - a["t_send"] for a, b in itertools.pairwise(rows)]
    assert all(r["rtt_s"] >= 0.025 for r in rows)  # every answer waited for the server
    assert len(rows) < 16 and seqs[-1] <= 30  # about one probe per 25 ms answer over 30 slots, not 31 probes
    assert min(gaps) >= 0.02 and all(b - a >= 2 for a, b in itertools.pairwise(seqs))  # no catch-up burst
