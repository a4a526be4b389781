"""Small socket programs run in host namespaces: a latency probe and short-flow / incast senders and sink.

``python3 -m traffic.flowtools CONFIG.json ROLE [INDEX]`` with ROLE one of
- ``echo``: TCP/UDP echo server of the RTT probe (runs until stopped; traffic.rtt_probe);
- ``probe``: the RTT prober of pair INDEX: a request in every slot, answers matched by seq (traffic.rtt_probe);
- ``sink``: receives short flows (a 12-byte header: flow id, size), acknowledges each with one byte; in incast
  mode it also releases every round to all senders at once over a control connection, when the last round is
  complete;
- ``source``: sender ``INDEX`` of the config's flows: FCT = connect to acknowledgment (JSON lines ``flow``).
Every socket has a timeout; an error ends the process non-zero with a message on stderr.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from typing import Any

from testbed.host.child import child_main
from traffic.connect import connect_retrying
from traffic.gate import ready_then_wait
from traffic.rtt_probe import echo, probe

HDR = struct.Struct("!IQ")  # flow id, size


def _tune(sock: socket.socket, cc: str | None, tos: int | None = None) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if cc:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    if tos:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)


def _recv_exact(sock: socket.socket, buf: memoryview) -> None:
    got = 0
    while got < len(buf):
        k = sock.recv_into(buf[got:])
        if k == 0:
            raise ConnectionError("peer closed the connection")
        got += k


def _connect(
    ip: str, port: int, cc: str | None, deadline: float, tos: int | None = None, src: tuple[str, int] | None = None
) -> socket.socket:
    """A connected TCP socket, retried until ``deadline``; ``src``: the (address, placed source port) it binds first
    (SO_REUSEADDR: a TIME_WAIT an earlier run on the same fabric left on that port does not stop the bind)."""

    def make() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _tune(s, cc, tos)
        if src is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(src)
        return s

    return connect_retrying(make, (ip, port), deadline)


def sink(cfg: dict[str, Any]) -> None:
    port, incast = cfg["port"], cfg["mode"] == "incast"
    lst = socket.create_server((cfg["dst_ip"], port), backlog=1024)
    done = threading.Condition()
    finished: dict[int, int] = {}  # round -> flows complete

    def serve(c: socket.socket) -> None:
        c.settimeout(cfg["timeout"])
        hdr = memoryview(bytearray(HDR.size))
        _recv_exact(c, hdr)
        fid, size = HDR.unpack(hdr)
        buf = memoryview(bytearray(min(size, 1 << 20) or 1))
        left = size
        while left:
            k = c.recv_into(buf[: min(left, len(buf))])
            if k == 0:
                raise ConnectionError(f"flow {fid} closed early")
            left -= k
        c.sendall(b"A")
        c.close()
        rnd = cfg["round_of"].get(str(fid), 0)
        with done:
            finished[rnd] = finished.get(rnd, 0) + 1
            done.notify_all()

    def acceptor() -> None:
        while True:
            c, _ = lst.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=acceptor, daemon=True).start()
    if not incast:
        while True:
            time.sleep(3600)
    ctl = socket.create_server((cfg["dst_ip"], port + 1), backlog=256)
    ctl.settimeout(cfg["timeout"])
    senders = []
    for _ in range(cfg["senders"]):
        c, _ = ctl.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        senders.append(c)
    ready_then_wait()
    for rnd in range(cfg["rounds"]):
        for c in senders:
            c.sendall(b"G")
        deadline = time.time() + cfg["timeout"]
        with done:
            while finished.get(rnd, 0) < cfg["senders"]:
                if not done.wait(max(0.0, deadline - time.time())):
                    raise TimeoutError(f"incast round {rnd} did not complete")
    while True:
        time.sleep(3600)


def source(cfg: dict[str, Any], index: int, out: Any) -> None:
    """Sender ``index``: each flow from its own placed source port (``sports``, 0: the kernel's), bound on this
    sender's address (``src_ips``), so that its 5-tuple, and so its path, is the same in every variant."""
    flows = cfg["flows"][index]  # [[flow id, size, round], ...]
    sports = cfg["sports"][index] if "sports" in cfg else [0] * len(flows)
    src_ip = cfg["src_ips"][index] if "src_ips" in cfg else ""
    ip, port, cc, timeout = cfg["dst_ip"], cfg["port"], cfg.get("cc"), cfg["timeout"]
    payload = memoryview(bytearray(max((f[1] for f in flows), default=1)))
    lock = threading.Lock()
    deadline = time.time() + timeout

    def one(fid: int, size: int, sport: int) -> None:
        ts = time.time()
        s = _connect(ip, port, cc, deadline, cfg.get("tos"), (src_ip, sport) if sport else None)
        sport = s.getsockname()[1]
        s.settimeout(timeout)
        s.sendall(HDR.pack(fid, size))
        s.sendall(payload[:size])
        ack = memoryview(bytearray(1))
        _recv_exact(s, ack)
        te = time.time()
        s.close()
        with lock:
            rec = {"type": "flow", "flow_id": fid, "size": size, "t_start": ts, "t_end": te, "sport": sport}
            out.write(json.dumps(rec) + "\n")

    if cfg["mode"] == "incast":
        ctl = _connect(ip, port + 1, None, deadline)
        ctl.settimeout(timeout)
        go = memoryview(bytearray(1))
        for (fid, size, _rnd), sport in zip(flows, sports, strict=True):
            _recv_exact(ctl, go)
            one(fid, size, sport)
        return
    queue = [(fid, size, sport) for (fid, size, _rnd), sport in zip(flows, sports, strict=True)]
    errors: list[BaseException] = []
    ready_then_wait()
    deadline = time.time() + timeout

    def worker() -> None:
        while True:
            with lock:
                if not queue or errors:
                    return
                fid, size, sport = queue.pop(0)
            try:
                one(fid, size, sport)
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(cfg["concurrency"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.time()))
        if t.is_alive():
            raise TimeoutError(f"short flows did not finish within {timeout:g} s")
    if errors:
        raise errors[0]


def main(argv: list[str]) -> int:
    with open(argv[0]) as fh:
        cfg = json.load(fh)
    role = argv[1]
    if role == "echo":
        echo(cfg, argv[2])
    elif role == "sink":
        sink(cfg)
    else:
        index = int(argv[2]) if len(argv) > 2 else 0
        with open(cfg["out"].format(index=index), "w") as out:
            if role == "probe":
                probe(cfg["probes"][index], out)
            else:
                source(cfg, index, out)
    return 0


if __name__ == "__main__":
    child_main("traffic.flowtools", lambda: main(sys.argv[1:]))
