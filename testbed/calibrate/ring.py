"""The iperf3 ring on the calibration fabric: flow i from host i to host i+1 (the last host to the first), each
flow to an iperf3 server of its own (``-s -1``: one test, then it exits).

The calibration's trials and the benchmarks' capacity trials both start their traffic here; they differ only in
how a process is launched (an owned process in a namespace, or stock Mininet's ``node.popen``) and in the
clients' options. The clients start once every server listens, so none of them races its server.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from testbed.calibrate.record import CalibrationError
from testbed.host.waiting import wait_until
from traffic.iperf import listening

# (role "server" or "client", flow index, host, argv) -> a process with ``pid`` and ``poll()``
Spawn = Callable[[str, int, str, list[str]], Any]
LISTEN_TIMEOUT_S = 10.0


def ring_flows(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """Host i -> host i+1 (the last to the first)."""
    return [(h, hosts[(i + 1) % len(hosts)]) for i, h in enumerate(hosts)]


def stop(p: Any) -> None:
    """Stop a process of the ring: an owned ``Proc`` by its process group, a plain ``Popen`` by itself."""
    if hasattr(p, "stop"):  # testbed.host.procs.Proc: INT -> TERM -> KILL on its process group
        p.stop(grace=1.0)
        return
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(3)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(3)


def _listening_or_gone(server: Any, port: int) -> bool:
    return listening(server.pid, port) or server.poll() is not None


def _await_listening(servers: Sequence[Any], flows: Sequence[tuple[str, str]], port: int, timeout: float) -> None:
    for i, (server, (src, dst)) in enumerate(zip(servers, flows, strict=True)):
        what = f"the iperf3 server of flow {src} -> {dst} to listen on port {port + i}"
        try:
            wait_until(partial(_listening_or_gone, server, port + i), timeout, what)
        except TimeoutError as exc:
            raise CalibrationError(str(exc)) from None
        if server.poll() is not None:
            raise CalibrationError(f"{what}: it exited first")


@contextmanager
def iperf3_ring(
    spawn: Spawn,
    flows: Sequence[tuple[str, str]],
    ips: Mapping[str, str],
    port: int,
    client_args: Sequence[str],
    listen_timeout: float = LISTEN_TIMEOUT_S,
) -> Iterator[list[Any]]:
    """Start flow i's server on its destination at ``port + i``, wait until every server listens, then start each
    client (``iperf3 -c IP -p PORT`` and ``client_args``) on its source; yields the clients. Every process is
    stopped on leaving, clients first."""
    procs: list[Any] = []
    try:
        for i, (_src, dst) in enumerate(flows):
            procs.append(spawn("server", i, dst, ["iperf3", "-s", "-1", "-p", str(port + i)]))
        _await_listening(procs, flows, port, listen_timeout)
        clients = []
        for i, (src, dst) in enumerate(flows):
            clients.append(spawn("client", i, src, ["iperf3", "-c", ips[dst], "-p", str(port + i), *client_args]))
            procs.append(clients[-1])
        yield clients
    finally:
        for p in reversed(procs):
            stop(p)
