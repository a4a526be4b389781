"""The RTT probe: a request in every slot of a fixed schedule, whatever the answers do; answers matched by seq.

Run as roles of ``python3 -m traffic.flowtools CONFIG``: ``echo IP`` (the echo server at a destination) and
``probe INDEX`` (the prober of pair INDEX); traffic.probes writes CONFIG and parses what the prober writes.

Schedule. Slot k is due at t0 + k * interval, t0 being the start gate's time (traffic.gate: one clock in every
namespace). Its request carries k and goes out at its slot whether or not the earlier ones were answered, so
several are outstanding whenever the round trip exceeds the interval, as with ``ping -i`` and irtt. An answer counts
at its own round trip, the time it arrived minus the time its request was sent (matched by k), however late.

Falling behind. If the prober itself runs late (no CPU for a while), a slot that is due is sent at once and its
send time is what it is (the round trip counts from it; the record keeps the scheduled time beside it). Requests
are never closer than half an interval, though: after a stall the missed slots go out at twice the rate until the
schedule is caught up, instead of in one burst that would queue the prober's requests behind each other and
measure that. No slot is skipped.

Times. A request is stamped just before it is sent, an answer by the kernel's arrival stamp (SO_TIMESTAMPNS), as
ping does both: a prober that reads its answers late does not add that to their round trips. The echo server is a
process too, and one the scheduler may leave waiting: it writes into each answer how long it held the request, from
the kernel's arrival stamp of it to the answer's send, and that is taken off the round trip, as irtt takes off its
server's processing time (ping's echo is answered in the kernel and holds nothing).

End. After the last send the prober waits ``drain_s(longest)`` for the answers still outstanding: three times the
longest round trip seen by then (answered, or still waiting), at least 1 s (five of TCP's minimum retransmission
timeouts), at most 10 s. What is outstanding then is lost.

Transport (``proto``). ``tcp``: one connection, the requests pipelined on it, so an answer waits behind the ones
before it (head-of-line) and behind any retransmission, and counts from when it could be read in order: the
latency a TCP flow's small messages see; with no loss it is the path's round trip, as ping sees it. ``udp``: a
datagram per request and its echo, as irtt: independent of each other, and a lost one stays lost.

Output, one JSON object a line: ``start`` (t0, interval, slots, proto, sport), a ``send`` per slot (seq, t_sched,
t_send), an ``answer`` per first answer (seq, t_recv, hold_s: the echo's holding time), ``end`` (t_end, drain_s,
outstanding). The round trip is t_recv - t_send - hold_s (traffic.probes.probe_rows).
"""

from __future__ import annotations

import json
import math
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from traffic.connect import connect_retrying
from traffic.gate import ready_then_wait

PROBE = struct.Struct("!Idd")  # seq, send time, the echo's holding time (0 in a request): every frame's head
HELLO_SEQ = 0xFFFFFFFF  # the UDP reachability request's seq: no slot has it, so its late answers are ignored
CATCH_UP_GAP = 0.5  # of an interval: the least gap between two requests, while a late prober catches up
DRAIN_MIN_S, DRAIN_MAX_S, DRAIN_RTTS = 1.0, 10.0, 3.0
CONNECT_S = 10.0  # how long the prober tries to reach its echo server (it may not listen yet)
SEND_TIMEOUT_S = 10.0  # a TCP request that cannot enter the send buffer for this long fails the probe
SO_TIMESTAMPNS = 35  # Linux (asm-generic): arrival times of received data as a struct timespec
TIMESPEC = struct.Struct("@qq")
HOLD_AT = 12  # the offset of the echo's holding time in a frame
CMSG_SPACE = socket.CMSG_SPACE(TIMESPEC.size)

Clock = Callable[[], float]
Answer = tuple[int, float, float]  # seq, arrival time, the echo's holding time
Emit = Callable[[dict[str, Any]], None]


class Link(Protocol):
    """A prober's path to its echo server."""

    def send(self, seq: int) -> float:
        """Send request ``seq`` now; return its send time, taken just before it leaves."""
        ...

    def receive(self, timeout: float) -> list[Answer]:
        """Wait at most ``timeout`` s for answers; return those that came (maybe none, maybe early): seq, arrival
        time, and how long the echo held the request."""
        ...


@dataclass(frozen=True)
class Schedule:
    t0: float
    interval: float
    slots: int

    def slot(self, k: int) -> float:
        return self.t0 + k * self.interval

    def due(self, k: int, t_prev: float) -> float:
        """When slot k goes out: its time, or half an interval after the previous request if that is later."""
        return max(self.slot(k), t_prev + CATCH_UP_GAP * self.interval)


def drain_s(longest: float) -> float:
    """How long the prober waits after its last send, given the longest round trip seen by then."""
    return min(DRAIN_MAX_S, max(DRAIN_MIN_S, DRAIN_RTTS * longest))


def frame_size(size: int) -> int:
    """Bytes of each request and answer: the job's ``size``, or the probe's head (20 bytes) if that is more."""
    return max(size, PROBE.size)


def run(link: Link, clock: Clock, sched: Schedule, emit: Emit) -> int:
    """Send every slot of ``sched`` over ``link`` on time, take answers meanwhile and for ``drain_s`` after the
    last send; ``emit`` each send, answer and the end. Returns how many requests were never answered."""
    sent: dict[int, float] = {}
    outstanding: set[int] = set()
    longest = 0.0

    def take(answers: list[Answer]) -> None:
        nonlocal longest
        for seq, t_recv, hold in answers:
            if seq in outstanding:  # the first answer to a request of this probe; others are ignored
                outstanding.discard(seq)
                longest = max(longest, t_recv - sent[seq])
                emit({"type": "answer", "seq": seq, "t_recv": t_recv, "hold_s": hold})

    t_prev = -math.inf
    for k in range(sched.slots):
        due = sched.due(k, t_prev)
        while (now := clock()) < due:
            take(link.receive(due - now))
        t_prev = sent[k] = link.send(k)
        outstanding.add(k)
        emit({"type": "send", "seq": k, "t_sched": sched.slot(k), "t_send": t_prev})
    now = clock()
    wait = drain_s(max([longest, *(now - sent[k] for k in outstanding)]))
    deadline = t_prev + wait
    while outstanding and (now := clock()) < deadline:
        take(link.receive(deadline - now))
    emit({"type": "end", "t_end": clock(), "drain_s": wait, "outstanding": len(outstanding)})
    return len(outstanding)


def _readable(sock: socket.socket, timeout: float) -> bool:
    return bool(select.select([sock], [], [], max(0.0, timeout))[0])


def _send_all(sock: socket.socket, data: bytes | bytearray) -> None:
    """Send all of ``data`` on a non-blocking socket, waiting for room in its send buffer."""
    view = memoryview(data)
    deadline = time.monotonic() + SEND_TIMEOUT_S
    while view:
        try:
            view = view[sock.send(view) :]
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [sock], [], left)[1]:
                raise TimeoutError(f"no room to send a request for {SEND_TIMEOUT_S:g} s") from None


def _rx_stamp(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The kernel's arrival time of what a recvmsg returned (SO_TIMESTAMPNS), on the clock of time.time()."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            return sec + nsec * 1e-9
    return None


class TcpLink:
    """Requests pipelined on one connection; answers come back in order, ``frame`` bytes each. An answer's time is
    when it became readable: the kernel's arrival stamp of its last segment, and never before the answer ahead of it
    (a segment held behind a lost one arrives early but waits, as the application does)."""

    def __init__(self, sock: socket.socket, frame: int, clock: Clock):
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock, self.frame, self.clock = sock, frame, clock
        self.request = bytearray(frame)
        self.answer = bytearray()  # the bytes of the answer being read
        self.t_last = -math.inf

    def send(self, seq: int) -> float:
        t = self.clock()
        PROBE.pack_into(self.request, 0, seq, t, 0.0)
        _send_all(self.sock, self.request)
        return t

    def receive(self, timeout: float) -> list[Answer]:
        if not _readable(self.sock, timeout):
            return []
        got: list[Answer] = []
        while True:  # an answer at a time, so that each gets the stamp of its own last segment
            try:
                data, anc, _, _ = self.sock.recvmsg(self.frame - len(self.answer), CMSG_SPACE)
            except BlockingIOError:
                return got
            if not data:
                raise ConnectionError("the echo server closed the connection")
            stamp = _rx_stamp(anc)
            self.t_last = max(self.t_last, self.clock() if stamp is None else stamp)
            self.answer += data
            if len(self.answer) == self.frame:
                seq, _, hold = PROBE.unpack_from(self.answer)
                got.append((seq, self.t_last, hold))
                self.answer.clear()


class UdpLink:
    """A datagram per request; each echo names its request and is timed by the kernel's arrival stamp."""

    def __init__(self, sock: socket.socket, frame: int, clock: Clock):
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock, self.clock = sock, clock
        self.request = bytearray(frame)

    def send(self, seq: int) -> float:
        t = self.clock()
        PROBE.pack_into(self.request, 0, seq, t, 0.0)
        try:
            _send_all(self.sock, self.request)
        except ConnectionRefusedError:  # an earlier datagram's ICMP error, reported here: this one was not sent
            _send_all(self.sock, self.request)
        return t

    def receive(self, timeout: float) -> list[Answer]:
        if not _readable(self.sock, timeout):
            return []
        got: list[Answer] = []
        while True:
            try:
                data, anc, _, _ = self.sock.recvmsg(65536, CMSG_SPACE)
            except BlockingIOError:
                return got
            except ConnectionRefusedError:  # an ICMP error of an earlier datagram: that request is lost
                continue
            if len(data) >= PROBE.size:
                stamp = _rx_stamp(anc)
                seq, _, hold = PROBE.unpack_from(data)
                got.append((seq, self.clock() if stamp is None else stamp, hold))


def _socket(kind: socket.SocketKind, cfg: dict[str, Any]) -> socket.socket:
    """A socket with the job's DSCP, bound to the placed source port (``sport``) when the config has one."""
    s = socket.socket(socket.AF_INET, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if cfg.get("tos"):
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, cfg["tos"])
    if kind == socket.SOCK_STREAM:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if cfg.get("cc"):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cfg["cc"].encode())
    if cfg.get("sport"):
        s.bind((cfg.get("src_ip") or "", cfg["sport"]))
    return s


def _tcp_connect(cfg: dict[str, Any], deadline: float) -> socket.socket:
    """Connect to the echo server, retrying until it listens or ``deadline`` passes."""
    return connect_retrying(lambda: _socket(socket.SOCK_STREAM, cfg), (cfg["dst_ip"], cfg["port"]), deadline)


def _udp_connect(cfg: dict[str, Any], deadline: float) -> socket.socket:
    """A connected UDP socket whose echo server has answered (it may not be bound yet: refused or silent)."""
    s = _socket(socket.SOCK_DGRAM, cfg)
    s.connect((cfg["dst_ip"], cfg["port"]))
    hello = PROBE.pack(HELLO_SEQ, 0.0, 0.0)
    s.settimeout(0.05)
    while True:
        try:
            s.send(hello)
            if s.recv(65536):
                return s
        except (TimeoutError, ConnectionRefusedError):
            if time.time() > deadline:
                s.close()
                raise TimeoutError("the UDP echo server never answered") from None


def probe(cfg: dict[str, Any], out: Any) -> None:
    """The prober of one pair: connect, wait for the start gate, run the schedule, write JSON lines to ``out``."""
    udp = cfg["proto"] == "udp"
    deadline = time.time() + CONNECT_S
    sock = _udp_connect(cfg, deadline) if udp else _tcp_connect(cfg, deadline)
    frame = frame_size(cfg["size"])
    link: Link = UdpLink(sock, frame, time.time) if udp else TcpLink(sock, frame, time.time)
    sport = sock.getsockname()[1]
    t0 = ready_then_wait()
    sched = Schedule(t0, cfg["interval"], cfg["slots"])

    def emit(rec: dict[str, Any]) -> None:
        out.write(json.dumps(rec) + "\n")

    emit(
        {
            "type": "start",
            "t0": t0,
            "interval": sched.interval,
            "slots": sched.slots,
            "proto": cfg["proto"],
            "sport": sport,
        }
    )
    try:
        run(link, time.time, sched, emit)
    finally:
        sock.close()


def _serve_tcp(c: socket.socket, frame: int) -> None:
    """Answer one connection's requests in order; each answer says how long its request was held here, from when it
    could be read in order (the kernel's arrival stamp of its last segment, never before the request ahead)."""
    c.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    buf = bytearray(frame)
    t_in = -math.inf
    try:
        while True:
            got = 0
            while got < frame:
                data, anc, _, _ = c.recvmsg(frame - got, CMSG_SPACE)
                if not data:
                    raise ConnectionError("peer closed the connection")
                buf[got : got + len(data)] = data
                got += len(data)
                stamp = _rx_stamp(anc)
                t_in = max(t_in, time.time() if stamp is None else stamp)
            struct.pack_into("!d", buf, HOLD_AT, time.time() - t_in)
            c.sendall(buf)
    except (ConnectionError, OSError):
        c.close()


def echo(cfg: dict[str, Any], ip: str) -> None:
    """The echo server of a destination: every request goes back with the time it was held here (TCP: in order, a
    frame at a time)."""
    port, frame = cfg["port"], frame_size(cfg["size"])
    if cfg["proto"] == "udp":
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        if cfg.get("tos"):
            u.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, cfg["tos"])
        u.bind((ip, port))
        while True:
            data, anc, _, addr = u.recvmsg(65536, CMSG_SPACE)
            t_in = _rx_stamp(anc)
            answer = bytearray(data)
            if len(answer) >= PROBE.size:
                t_out = time.time()
                struct.pack_into("!d", answer, HOLD_AT, t_out - (t_out if t_in is None else t_in))
            u.sendto(answer, addr)
    lst = socket.create_server((ip, port), backlog=64)
    while True:
        c, _ = lst.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if cfg.get("cc"):
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cfg["cc"].encode())
        threading.Thread(target=_serve_tcp, args=(c, frame), daemon=True).start()
