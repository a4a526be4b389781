"""A rank's stall watchdog: a flow with data outstanding that makes no progress for longer than TCP's own recovery
takes is named, with both ends' TCP state, in the worker's JSON-lines output.

One thread per worker wakes every ``INTERVAL_S`` and looks at two things:

- each receive in progress, as the receiver threads report it (``Progress.recv``: bytes got of the message, when
  the last bytes came). A receive that has some bytes of its message (so its sender has written it), or whose
  socket holds unread bytes, and has had nothing for longer than the bound, is a ``recv`` stall.
- each socket this rank sends on, from its TCP_INFO: data written and not yet acknowledged (``unacked`` or
  ``notsent_bytes``) while ``bytes_acked`` stands still for longer than the bound is a ``send`` stall. The send side
  is watched on the socket, not on ``sendall``: the kernel holds up to a send buffer of data after the write
  returned.

The bound is ``max(2 x RTO, FLOOR_S)`` with the socket's own retransmission timeout (``tcpi_rto``, less the doubling
of the timeouts already taken, ``tcpi_backoff``): a flow that loses a segment retransmits it within one RTO, so
two RTOs without progress means a retransmission failed too, or something other than loss holds the flow. Linux
never sets an RTO under 200 ms (TCP_RTO_MIN), which is the floor. A receive-only socket's RTO stands for its
sender's: both come from the same path's RTT and the same minimum.

Records (``type``): ``stall`` when one is detected (``t_start`` the last progress, ``t_detect``, the bound, bytes
got/needed, bytes queued in the socket, the stalled socket's TCP_INFO, every other socket of the rank with its
TCP_INFO and queues, and the namespace's TCP counters), ``stall_end`` when progress resumes (``t_end``, the
socket's TCP_INFO then, the largest backoff, probe and timeout counts seen during the stall, and the TCP counters
that changed), and one ``watch`` at the end (the watchdog's settings, ticks and its own CPU seconds). A receive's
``t_start``/``t_end`` come from the receiver thread's own clock readings; a send stall's are the ticks that saw
the last and the next progress (``INTERVAL_S`` resolution).
"""

from __future__ import annotations

import fcntl
import json
import resource
import struct
import termios
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from testbed.telemetry.netstat import parse_counters
from testbed.telemetry.tcpinfo import TcpInfo, parse_tcp_info, read_tcp_info_raw
from testbed.telemetry.tcpinfo import field as tcp_field

FLOOR_S = 0.2  # Linux's least retransmission timeout (TCP_RTO_MIN)
INTERVAL_S = 0.05  # the watchdog's tick: a send stall's start and end are known to this
SIOCINQ = termios.FIONREAD  # bytes received and not yet read
SIOCOUTQ = termios.TIOCOUTQ  # bytes written and not yet acknowledged (unsent included)

# iter, step, bytes got, bytes needed (0: no receive in progress), time of the last bytes (or of the post)
Recv = tuple[int, int, int, int, float]


class Progress:
    """What a rank's threads tell the watchdog. Each update is one dict store, atomic under the GIL, so the
    receiver's loop pays a clock reading and a tuple per ``recv_into`` and takes no lock."""

    def __init__(self) -> None:
        self.recv: dict[int, Recv] = {}
        # peer -> (last bytes before, first bytes after) the latest wait longer than FLOOR_S within a message
        self.gap: dict[int, tuple[float, float]] = {}
        self.sent: dict[int, tuple[int, int]] = {}  # peer -> (iter, step) of the latest message written


def stall_bound(info: TcpInfo, floor: float = FLOOR_S) -> float:
    """Seconds without progress that make a stall: twice the socket's RTO before any backoff, at least ``floor``.
    Each retransmission timeout doubles ``tcpi_rto`` and counts in ``tcpi_retransmits`` and ``tcpi_backoff``; a
    zero-window probe counts in ``tcpi_backoff`` and leaves the RTO alone."""
    rto = info.rto_us / 1e6
    if info.retransmits and info.backoff:
        rto /= 2**info.backoff
    return max(2 * rto, floor)


class SocketReader(Protocol):
    """The kernel's view of a socket (a fake in the unit tests)."""

    def tcp_raw(self, sock: Any) -> bytes: ...
    def inq(self, sock: Any) -> int: ...
    def outq(self, sock: Any) -> int: ...
    def counters(self) -> dict[str, int]: ...


def _ioctl_int(sock: Any, request: int) -> int:
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), request, b"\0\0\0\0"))[0])


class KernelReader:
    """TCP_INFO by getsockopt, queues by ioctl, counters from this namespace's /proc/net/{netstat,snmp}."""

    def tcp_raw(self, sock: Any) -> bytes:
        return read_tcp_info_raw(sock)

    def inq(self, sock: Any) -> int:
        return _ioctl_int(sock, SIOCINQ)

    def outq(self, sock: Any) -> int:
        return _ioctl_int(sock, SIOCOUTQ)

    def counters(self) -> dict[str, int]:
        """This namespace's TCP counters, and the page faults that stop a process without a CPU stall: this
        worker's own major faults (a page it touched had to be read in) and the machine's."""
        out: dict[str, int] = {"Proc.majflt": resource.getrusage(resource.RUSAGE_SELF).ru_majflt}
        try:
            for name in ("netstat", "snmp"):
                out.update(parse_counters(Path(f"/proc/self/net/{name}").read_text()))
            out.update(vm_faults(Path("/proc/vmstat").read_text()))
        except (OSError, ValueError):
            return out
        return out


def vm_faults(vmstat: str) -> dict[str, int]:
    """The machine's major page faults from /proc/vmstat's text, as ``Vm.pgmajfault``."""
    for line in vmstat.splitlines():
        key, _, value = line.partition(" ")
        if key == "pgmajfault":
            return {"Vm.pgmajfault": int(value)}
    return {}


@dataclass
class _Open:
    """A stall detected and not yet over."""

    side: str
    peer: int
    it: int
    step: int
    t_start: float
    got: int
    acked: int
    counters: dict[str, int]
    start_info: TcpInfo
    peaks: dict[str, int] = field(default_factory=dict)

    def see(self, info: TcpInfo) -> None:
        for k in ("backoff", "probes", "retransmits"):
            self.peaks[k] = max(self.peaks.get(k, 0), getattr(info, k))


@dataclass
class _Sending:
    acked: int
    t: float  # the tick that last saw progress (or nothing outstanding)


class Watchdog:
    """Watches one rank's sockets: ``tick(now)`` does one round (the thread calls it every ``interval``; the unit
    tests call it with a fake clock). ``drain()`` hands over the records written since the last drain."""

    def __init__(
        self,
        rank: int,
        socks: Mapping[int, Any],
        sends: set[int],
        recvs: set[int],
        progress: Progress,
        interval: float = INTERVAL_S,
        floor: float = FLOOR_S,
        reader: SocketReader | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.rank, self.socks, self.sends, self.recvs = rank, socks, sends, recvs
        self.progress, self.interval, self.floor = progress, interval, floor
        self.reader: SocketReader = reader or KernelReader()
        self.clock = clock
        self.ticks, self.cpu_s, self.error = 0, 0.0, ""
        self._open: dict[tuple[str, int], _Open] = {}
        self._sending: dict[int, _Sending] = {}
        # per peer, a receive with nothing read yet: (iteration, step) and the tick that first saw bytes unread
        self._unread: dict[int, tuple[tuple[int, int], float]] = {}
        self._records: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the thread -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        cpu0 = time.thread_time()
        try:
            while not self._stop.wait(self.interval):
                self.tick(self.clock())
            if self._open:  # a last look: a stall that ended since the last tick gets its end
                self.tick(self.clock())
        except Exception as exc:  # the watchdog must never end the worker: say why it stopped watching
            self.error = f"{type(exc).__name__}: {exc}"
        self.cpu_s = time.thread_time() - cpu0

    def drain(self) -> list[dict[str, Any]]:
        out, self._records = self._records, []
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "type": "watch",
            "rank": self.rank,
            "interval_s": self.interval,
            "floor_s": self.floor,
            "ticks": self.ticks,
            "cpu_s": self.cpu_s,
            "open": len(self._open),
            "error": self.error,
        }

    @contextmanager
    def writing_to(self, out: IO[str]) -> Iterator[Watchdog]:
        """Watch while the block runs; at its end (an error too) stop and write what is left and the summary."""
        self.start()
        try:
            yield self
        finally:
            self.stop()
            self.write(out)
            out.write(_line(self.summary()))

    def write(self, out: IO[str]) -> None:
        out.writelines(_line(r) for r in self.drain())

    def totals(self) -> tuple[int, int | None]:
        """Segments every socket of the rank retransmitted, and its retransmission timeouts (None on a kernel
        before 6.7), over the sockets' lives: the difference across an iteration is its loss."""
        retrans = 0
        rtos: int | None = 0
        for sock in self.socks.values():
            try:
                raw = self.reader.tcp_raw(sock)
            except OSError:
                continue
            retrans += tcp_field(raw, "total_retrans") or 0
            rto = tcp_field(raw, "total_rto")
            rtos = None if rto is None or rtos is None else rtos + rto
        return retrans, rtos

    # --- one round ----------------------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        self.ticks += 1
        for watch, peers in ((self._watch_recv, self.recvs), (self._watch_send, self.sends)):
            for v in peers:
                try:
                    watch(v, now)
                except OSError:  # a socket the worker is closing: nothing more to watch there
                    continue

    def _info(self, v: int) -> TcpInfo:
        return parse_tcp_info(self.reader.tcp_raw(self.socks[v]))

    def _watch_recv(self, v: int, now: float) -> None:
        st = self.progress.recv.get(v)
        op = self._open.get(("recv", v))
        if op is not None:
            if st is None or (st[0], st[1]) != (op.it, op.step) or st[2] != op.got:
                gap = self.progress.gap.get(v)
                t_end = gap[1] if gap is not None and gap[0] == op.t_start else (st[4] if st else now)
                self._close(op, t_end, st[2] if st and (st[0], st[1]) == (op.it, op.step) else None)
            else:
                op.see(self._info(v))
            return
        if st is None or st[3] == 0 or st[2] >= st[3]:
            return
        it, step, got, need, t_last = st
        if now - t_last <= self.floor:
            return
        sock = self.socks[v]
        inq = self.reader.inq(sock)
        since = t_last
        if got == 0:  # waiting for the message is the schedule's; waiting with its bytes unread is not
            if inq == 0:
                self._unread.pop(v, None)
                return  # nothing of this message has come: its sender has not written it yet
            first = self._unread.get(v)
            if first is None or first[0] != (it, step):
                self._unread[v] = ((it, step), now)  # the clock starts when its bytes are first seen unread
                return
            since = first[1]
        info = self._info(v)
        bound = stall_bound(info, self.floor)
        if now - since > bound:
            self._detect("recv", v, it, step, since, now, bound, info, got, need, inq)

    def _watch_send(self, v: int, now: float) -> None:
        raw = self.reader.tcp_raw(self.socks[v])
        acked = tcp_field(raw, "bytes_acked") or 0
        outstanding = bool(tcp_field(raw, "unacked") or tcp_field(raw, "notsent_bytes"))
        tr = self._sending.get(v)
        op = self._open.get(("send", v))
        if tr is None or acked != tr.acked or not outstanding:
            self._sending[v] = _Sending(acked, now)
            if op is not None:
                self._close(op, now, None, parse_tcp_info(raw))
            return
        if op is not None:
            op.see(parse_tcp_info(raw))
            return
        if now - tr.t <= self.floor:
            return
        info = parse_tcp_info(raw)
        bound = stall_bound(info, self.floor)
        if now - tr.t > bound:
            it, step = self.progress.sent.get(v, (-1, -1))
            self._detect("send", v, it, step, tr.t, now, bound, info, None, None, self.reader.outq(self.socks[v]))

    def _detect(
        self,
        side: str,
        v: int,
        it: int,
        step: int,
        t_start: float,
        now: float,
        bound: float,
        info: TcpInfo,
        got: int | None,
        need: int | None,
        queued: int,
    ) -> None:
        counters = self.reader.counters()
        op = _Open(side, v, it, step, t_start, got or 0, info.bytes_acked or 0, counters, info)
        op.see(info)
        self._open[(side, v)] = op
        self._records.append(
            {
                "type": "stall",
                "side": side,
                "rank": self.rank,
                "peer": v,
                "iter": it,
                "step": step,
                "t_start": t_start,
                "t_detect": now,
                "bound_s": bound,
                "bytes_got": got,
                "bytes_needed": need,
                "queued_bytes": queued,
                "tcp": asdict(info),
                "sockets": self._others(v),
                "counters": counters,
            }
        )

    def _close(self, op: _Open, t_end: float, got: int | None, info: TcpInfo | None = None) -> None:
        del self._open[(op.side, op.peer)]
        try:
            info = info or self._info(op.peer)
        except OSError:
            info = None
        counters = self.reader.counters()
        changed = {k: v - op.counters[k] for k, v in counters.items() if k in op.counters and v != op.counters[k]}
        self._records.append(
            {
                "type": "stall_end",
                "side": op.side,
                "rank": self.rank,
                "peer": op.peer,
                "iter": op.it,
                "step": op.step,
                "t_start": op.t_start,
                "t_end": t_end,
                "duration_s": t_end - op.t_start,
                "bytes_got": got,
                "tcp": asdict(info) if info is not None else None,
                **{f"{k}_max": v for k, v in op.peaks.items()},
                "counters_changed": changed,
            }
        )

    def _others(self, v: int) -> list[dict[str, Any]]:
        """Every other socket of the rank as it stands: which way it carries this rank's data, its queues and
        its TCP_INFO (a socket that fails to answer is left out)."""
        out = []
        for u, sock in sorted(self.socks.items()):
            if u == v:
                continue
            try:
                info = parse_tcp_info(self.reader.tcp_raw(sock))
                inq, outq = self.reader.inq(sock), self.reader.outq(sock)
            except OSError:
                continue
            mine = {"peer": u, "send": u in self.sends, "recv": u in self.recvs, "inq": inq, "outq": outq}
            out.append({**mine, "tcp": asdict(info)})
        return out


def _line(rec: Mapping[str, Any]) -> str:
    return json.dumps(rec) + "\n"
