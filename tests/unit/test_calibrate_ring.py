"""The iperf3 ring's start (testbed/calibrate/ring.py) with stand-in processes: clients start only once every
server listens, and a server that exits or never listens stops the ring with one clear error."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.calibrate.record import CalibrationError
from testbed.calibrate.ring import iperf3_ring, ring_flows

FLOWS = ring_flows(["h1", "h2", "h3"])
IPS = {"h1": "10.0.0.1", "h2": "10.0.0.2", "h3": "10.0.0.3"}


class FakeProc:
    """A process of this test's own network namespace (its pid is ours): ``listening`` reads our /proc."""

    def __init__(self, argv: list[str], exited: bool = False) -> None:
        self.pid = os.getpid()
        self.argv = argv
        self.exited = exited
        self.stopped = False

    def poll(self) -> int | None:
        return 1 if self.exited else None

    def stop(self, grace: float = 1.0) -> None:
        self.stopped = True


def _free_base(n: int) -> int:
    """A port with the ``n`` ports from it free on this machine."""
    for base in range(42000, 60000, 97):
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


@pytest.fixture
def listeners() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for s in opened:
        s.close()


def _listen(port: int, opened: list[socket.socket]) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    opened.append(s)


def test_ring_flows_go_host_to_next_host() -> None:
    assert FLOWS == [("h1", "h2"), ("h2", "h3"), ("h3", "h1")]


def test_clients_start_once_every_server_listens(listeners: list[socket.socket]) -> None:
    base = _free_base(len(FLOWS))
    events: list[tuple[str, int, str]] = []
    procs: list[FakeProc] = []

    def spawn(role: str, i: int, host: str, argv: list[str]) -> FakeProc:
        events.append((role, i, host))
        if role == "server":  # listens later than a fixed 0.3 s head start would wait
            threading.Timer(0.2 * (i + 1), _listen, (base + i, listeners)).start()
        else:
            assert len(listeners) == len(FLOWS), f"client {i} started before every server listened"
        procs.append(FakeProc(argv))
        return procs[-1]

    with iperf3_ring(spawn, FLOWS, IPS, base, ["-t", "1"]) as clients:
        assert [c.argv for c in clients] == [
            ["iperf3", "-c", IPS[dst], "-p", str(base + i), "-t", "1"] for i, (_src, dst) in enumerate(FLOWS)
        ]
    assert events == [("server", i, d) for i, (_s, d) in enumerate(FLOWS)] + [
        ("client", i, s) for i, (s, _d) in enumerate(FLOWS)
    ]
    assert procs[0].argv == ["iperf3", "-s", "-1", "-p", str(base)]
    assert all(p.stopped for p in procs)


def test_a_server_that_exits_stops_the_ring_with_its_flow_named(listeners: list[socket.socket]) -> None:
    spawned: list[FakeProc] = []

    def spawn(role: str, i: int, host: str, argv: list[str]) -> Any:
        spawned.append(FakeProc(argv, exited=i == 1))
        return spawned[-1]

    base = _free_base(len(FLOWS))
    _listen(base, listeners)  # the first server listens; the second has exited
    with (
        pytest.raises(CalibrationError, match=r"h2 -> h3 .*exited first"),
        iperf3_ring(spawn, FLOWS, IPS, base, [], listen_timeout=5.0),
    ):
        pass
    assert all("-s" in p.argv and p.stopped for p in spawned)  # no client started; every server stopped


def test_a_server_that_never_listens_times_out() -> None:
    base = _free_base(len(FLOWS))
    with (
        pytest.raises(CalibrationError, match=rf"timed out .*h1 -> h2 to listen on port {base}"),
        iperf3_ring(lambda role, i, host, argv: FakeProc(argv), FLOWS, IPS, base, [], listen_timeout=0.05),
    ):
        pass
