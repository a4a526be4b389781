"""Per-host worker of the rank-based jobs (collectives, parameter server, pipeline): one process per rank.

Run as ``/usr/bin/python3 -m traffic.worker CONFIG.json RANK`` inside the host's namespace. It builds the job's
whole schedule (``traffic.schedule``) from the config, keeps its own rank's part, connects one TCP socket per peer
(the lower rank connects, from the placed source port the config gives it; ``TCP_CONGESTION`` set per socket when
the job says ``cc``), and runs every iteration after a barrier held by rank 0 (all ranks start at the same instant
of the shared clock). Per peer one sender
thread (``sendall`` from one preallocated buffer) and one receiver thread (``recv_into`` a preallocated buffer);
a condition variable releases sends/computes whose dependencies are met. No per-byte Python work.

A size sweep (``sizes`` in the config) runs warmup + iterations of each size in turn, iterations numbered on.

Output: JSON lines in ``<out>``: ``step`` records (one per iteration, step, op, peer), ``iter`` records (per rank,
with the size it moved, and the segments its sockets retransmitted and their timeouts during it), one ``flow``
record per connection this rank sent on (ports, bytes, first/last send) and one final ``cpu`` record (user+system
seconds of this process, wall seconds). A watchdog thread (``traffic.watchdog``) adds ``stall`` and ``stall_end``
records for a flow that made no progress for two RTOs, and one ``watch`` record. Any error, a dead peer or a
timeout ends the process with a non-zero exit and a message on stderr.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time
from typing import Any

from testbed.host.child import child_main
from traffic.gate import ready_then_wait
from traffic.schedule import (
    COMPUTE,
    RankProgram,
    Schedule,
    Token,
    collective_schedule,
    pipeline_schedule,
    ps_schedule,
    sent_key,
)
from traffic.trace_schedule import TraceBuilder
from traffic.watchdog import FLOOR_S, Progress, Watchdog

BARRIER_LEAD = 0.01  # rank 0 announces a start this far in the future (>> one RTT), then every rank sleeps to it


def build_schedule(cfg: dict[str, Any], size: int | None = None) -> Schedule:
    """The job's schedule of one iteration; a collective's moves ``size`` bytes (default its wire size)."""
    kind = cfg["kind"]
    if "trace" in cfg:  # an imported trace or a DDP step (traffic.trace_job)
        return TraceBuilder(cfg["trace"], cfg["slice"], 1.0, leaves=cfg["leaves"]).build()[0]
    if kind == "ps":
        return ps_schedule(cfg["workers"], cfg["servers"], cfg["size"], cfg["slice"])
    if kind == "pipeline":
        p = cfg["pipeline"]
        return pipeline_schedule(
            len(cfg["hosts"]),
            p["microbatches"],
            p["activation"],
            p["gradient"],
            p["compute"],
            p["compute_bwd"],
            p["schedule"],
        )
    return collective_schedule(
        kind,
        cfg["algorithm"],
        len(cfg["hosts"]),
        cfg["wire_size"] if size is None else size,
        cfg["slice"],
        cfg.get("leaves"),
        cfg.get("bucket", 1),
        cfg.get("compute_gap", 0.0),
        cfg.get("window"),
        cfg.get("channels", 1),
    )


TCP_NOTSENT_LOWAT = 25  # socket.TCP_NOTSENT_LOWAT is missing from Python 3.11's socket module


def _tune(sock: socket.socket, cc: str | None, lowat: int | None = None, tos: int | None = None) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tos:  # both ends set it: each direction's packets carry the job's DSCP
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    if lowat:  # sendall returns once at most this much is unsent, so a "sent" token means nearly on the wire
        sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, lowat)
    if cc:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("peer closed the connection")
        got += k
    return bytes(buf)


def bind_source(sock: socket.socket, ip: str, sport: int) -> None:
    """Bind a connecting socket to its placed source port (SO_REUSEADDR: a TIME_WAIT an earlier run on the same
    fabric left on that port does not stop it); a port in use is an error, not something to retry."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((ip, sport))
    except OSError as exc:
        sock.close()
        raise RuntimeError(f"cannot bind source port {ip}:{sport}: {exc.strerror}") from None


def connect_peers(cfg: dict[str, Any], rank: int, peers: set[int], deadline: float) -> dict[int, socket.socket]:
    """One TCP connection per peer id (``rank + n x channel``): connect to higher ranks' listeners, accept lower
    ones (each says its rank and channel). A connection this rank opens binds its placed source port first
    (``sports``, traffic.placement; absent or 0: the kernel picks), so its 5-tuple is the same in every variant."""
    hosts, port, cc, lowat = cfg["hosts"], cfg["port"], cfg.get("cc"), cfg.get("notsent_lowat")
    tos = cfg.get("tos")
    n = len(hosts)
    sports = cfg.get("sports", {}).get(str(rank), {})
    lst = socket.create_server((hosts[rank]["ip"], hosts[rank].get("port", port)), backlog=256)
    lst.settimeout(max(0.1, deadline - time.time()))
    socks: dict[int, socket.socket] = {}
    for v in sorted(x for x in peers if x % n > rank):
        p = v % n
        sport = int(sports.get(str(v), 0))
        while True:
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                _tune(s, cc, lowat, tos)
                if sport:
                    bind_source(s, hosts[rank]["ip"], sport)
                s.settimeout(1.0)
                s.connect((hosts[p]["ip"], hosts[p].get("port", port)))
                break
            except OSError:
                s.close()
                if time.time() > deadline:
                    raise TimeoutError(f"rank {rank}: cannot connect to rank {p} at {hosts[p]['ip']}:{port}") from None
                time.sleep(0.05)
        s.sendall(struct.pack("!II", rank, v // n))
        socks[v] = s
    need = {x for x in peers if x % n < rank}
    while need:
        s, _ = lst.accept()
        _tune(s, cc, lowat, tos)
        s.settimeout(max(0.1, deadline - time.time()))
        r, ch = struct.unpack("!II", _recv_exact(s, 8))
        socks[r + n * ch] = s
        need.discard(r + n * ch)
    lst.close()
    for s in socks.values():
        s.settimeout(cfg["timeout"])
    return socks


class Barrier:
    """Rank 0 collects one byte per rank and answers everyone with a common start time (shared clock)."""

    def __init__(self, cfg: dict[str, Any], rank: int, deadline: float):
        self.rank, self.n, self.socks = rank, len(cfg["hosts"]), []
        self.gated = rank == 0  # the first release waits for the run's go time (traffic.gate)
        port = cfg["hosts"][0].get("port", cfg["port"]) + 1
        if rank == 0:
            lst = socket.create_server((cfg["hosts"][0]["ip"], port), backlog=256)
            lst.settimeout(max(0.1, deadline - time.time()))
            for _ in range(self.n - 1):
                s, _ = lst.accept()
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(cfg["timeout"])
                self.socks.append(s)
            lst.close()
        else:
            while True:
                try:
                    s = socket.create_connection((cfg["hosts"][0]["ip"], port), timeout=1.0)
                    break
                except OSError:
                    if time.time() > deadline:
                        raise TimeoutError(f"rank {rank}: cannot reach the barrier at rank 0") from None
                    time.sleep(0.05)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.settimeout(cfg["timeout"])
            self.socks.append(s)

    def wait(self) -> float:
        if self.rank == 0:
            for s in self.socks:
                _recv_exact(s, 1)
            if self.gated:
                ready_then_wait()
                self.gated = False
            go = time.time() + BARRIER_LEAD
            for s in self.socks:
                s.sendall(struct.pack("!d", go))
        else:
            self.socks[0].sendall(b"R")
            (go,) = struct.unpack("!d", _recv_exact(self.socks[0], 8))
        delay = go - time.time()
        if delay > 0:
            time.sleep(delay)
        return go


class Iteration:
    """Runs one iteration of a rank's program over connected sockets; collects (step, op, peer, t0, t1, bytes)."""

    def __init__(
        self,
        prog: RankProgram,
        socks: dict[int, socket.socket],
        sendbuf: memoryview,
        t0: float,
        progress: Progress | None = None,
        it: int = 0,
    ):
        self.prog, self.socks, self.sendbuf, self.t0 = prog, socks, sendbuf, t0
        self.progress, self.it = progress or Progress(), it  # what the watchdog reads (traffic.watchdog)
        self.cond = threading.Condition()
        self.counts: dict[int, int] = {}
        self.error: BaseException | None = None
        self.records: list[tuple[int, str, int, float, float, int]] = []

    def _wait(self, deps: tuple[Token, ...]) -> None:
        with self.cond:
            while self.error is None and any(self.counts.get(p, 0) < c for p, c in deps):
                self.cond.wait(1.0)
            if self.error is not None:
                raise RuntimeError("another thread failed")

    def _bump(self, key: int) -> None:
        with self.cond:
            self.counts[key] = self.counts.get(key, 0) + 1
            self.cond.notify_all()

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except BaseException as exc:
            with self.cond:
                if self.error is None:
                    self.error = exc
                self.cond.notify_all()

    def _sender(self, peer: int) -> None:
        sock, rec = self.socks[peer], self.records.append
        for msg in self.prog.sends[peer]:
            if msg.deps:
                self._wait(msg.deps)
            if msg.not_before:
                delay = self.t0 + msg.not_before - time.time()
                if delay > 0:
                    time.sleep(delay)
            ts = time.time()
            self.progress.sent[peer] = (self.it, msg.step)
            sock.sendall(self.sendbuf[: msg.nbytes])
            rec((msg.step, "send", peer, ts, time.time(), msg.nbytes))
            self._bump(sent_key(peer))

    def _receiver(self, peer: int) -> None:
        sock, rec = self.socks[peer], self.records.append
        queue = self.prog.recvs[peer]
        buf = memoryview(bytearray(max(n for n, _ in queue)))
        state, gaps, it = self.progress.recv, self.progress.gap, self.it
        for nbytes, step in queue:
            last = time.time()
            got, ts = 0, (last if nbytes == 0 else 0.0)  # an empty message (a tiny size's chunk) is there
            state[peer] = (it, step, 0, nbytes, last)
            while got < nbytes:
                k = sock.recv_into(buf[got:nbytes])
                if k == 0:
                    raise ConnectionError(f"peer rank {peer} closed the connection")
                now = time.time()
                if got == 0:
                    ts = now
                if now - last > FLOOR_S:  # a long wait: when it ended, to the clock reading (the watchdog's t_end)
                    gaps[peer] = (last, now)
                got, last = got + k, now
                state[peer] = (it, step, got, nbytes, now)
            rec((step, "recv", peer, ts, time.time(), nbytes))
            self._bump(peer)
        state[peer] = (it, -1, 0, 0, time.time())

    def _computer(self) -> None:
        for item in self.prog.computes:
            self._wait(item.deps)
            ts = time.time()
            time.sleep(item.seconds)
            self.records.append((item.step, "compute", -1, ts, time.time(), 0))
            self._bump(COMPUTE)

    def run(self, timeout: float) -> float:
        threads = [threading.Thread(target=self._guard, args=(self._sender, p), daemon=True) for p in self.prog.sends]
        threads += [
            threading.Thread(target=self._guard, args=(self._receiver, p), daemon=True) for p in self.prog.recvs
        ]
        if self.prog.computes:
            threads.append(threading.Thread(target=self._guard, args=(self._computer,), daemon=True))
        for t in threads:
            t.start()
        deadline = time.time() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.time()))
            if t.is_alive():
                raise TimeoutError(f"iteration did not finish within {timeout:g} s")
        if self.error is not None:
            raise self.error
        return time.time()


def aggregate(
    records: list[tuple[int, str, int, float, float, int]], nranks: int
) -> list[tuple[int, str, int, float, float, int]]:
    """One record per (step, op, peer rank): first start, last end, bytes summed (slices and channels folded)."""
    acc: dict[tuple[int, str, int], list[float]] = {}
    for step, op, vpeer, ts, te, n in records:
        peer = vpeer % nranks if vpeer >= 0 else vpeer
        a = acc.get((step, op, peer))
        if a is None:
            acc[(step, op, peer)] = [ts, te, n]
        else:
            a[0], a[1], a[2] = min(a[0], ts), max(a[1], te), a[2] + n
    return sorted(
        ((k[0], k[1], k[2], v[0], v[1], int(v[2])) for k, v in acc.items()),
        key=lambda r: (r[3], r[0]),
    )


def main(argv: list[str]) -> int:
    cfg_path, rank = argv[0], int(argv[1])
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    start_wall, start_cpu = time.time(), os.times()
    deadline = time.time() + cfg.get("connect_timeout", 20.0)
    sizes = cfg.get("sizes") or [None]  # a sweep runs warmup + iterations of each size, smallest first
    progs = [build_schedule(cfg, size).ranks[rank] for size in sizes]
    peers = {p for prog in progs for p in (*prog.sends, *prog.recvs)}
    socks = connect_peers(cfg, rank, peers, deadline)
    barrier = Barrier(cfg, rank, deadline)
    biggest = max((m.nbytes for prog in progs for q in prog.sends.values() for m in q), default=1)
    sendbuf = memoryview(bytearray(os.urandom(min(biggest, 1 << 16)) * (-(-biggest // (1 << 16)))))
    gap = float(cfg.get("compute_gap", 0.0)) if cfg.get("bucket", 1) == 1 else 0.0
    out_path = cfg["out"].format(rank=rank)
    progress = Progress()
    sends = {p for prog in progs for p in prog.sends}
    watchdog = Watchdog(rank, socks, sends, {p for prog in progs for p in prog.recvs}, progress)
    with open(out_path, "w") as out, watchdog.writing_to(out):
        flows: dict[int, list[float]] = {}  # peer id -> [first send start, last send end, bytes] (this direction)
        per_size = cfg["warmup"] + cfg["iterations"]
        for it in range(per_size * len(progs)):
            prog, size = progs[it // per_size], sizes[it // per_size]
            lost0 = watchdog.totals()  # the rank's sockets' retransmissions and timeouts so far
            go = barrier.wait()
            if gap > 0:
                time.sleep(gap)
            t_start = time.time() if gap > 0 else go
            run = Iteration(prog, socks, sendbuf, go, progress, it)
            t_end = run.run(cfg["timeout"])
            lost = [b - a if a is not None and b is not None else None for a, b in zip(lost0, watchdog.totals())]
            warm = it % per_size < cfg["warmup"]
            for _step, op, vpeer, ts, te, n in run.records:
                if op == "send":
                    f = flows.setdefault(vpeer, [ts, te, 0])
                    f[0], f[1], f[2] = min(f[0], ts), max(f[1], te), f[2] + n
            out.writelines(
                json.dumps(
                    {
                        "type": "step",
                        "iter": it,
                        "warmup": warm,
                        "rank": rank,
                        "step": step,
                        "op": op,
                        "peer": peer,
                        "t_start": ts,
                        "t_end": te,
                        "bytes": n,
                    }
                )
                + "\n"
                for step, op, peer, ts, te, n in aggregate(run.records, len(cfg["hosts"]))
            )
            out.write(
                json.dumps(
                    {
                        "type": "iter",
                        "iter": it,
                        "warmup": warm,
                        "rank": rank,
                        "t_start": t_start,
                        "t_end": t_end,
                        "bytes_sent": prog.bytes_sent(),
                        "size": cfg.get("wire_size", cfg.get("size")) if size is None else size,
                        "retrans": lost[0],
                        "timeouts": lost[1],
                    }
                )
                + "\n"
            )
            watchdog.write(out)
        for vpeer, (fs, fe, nb) in sorted(flows.items()):
            sock = socks[vpeer]
            rec = {
                "type": "flow",
                "peer": vpeer,
                "sport": sock.getsockname()[1],
                "dport": sock.getpeername()[1],
                "t_start": fs,
                "t_end": fe,
                "bytes": int(nb),
            }
            out.write(json.dumps(rec) + "\n")
        cpu = os.times()
        out.write(
            json.dumps(
                {
                    "type": "cpu",
                    "rank": rank,
                    "cpu_s": cpu.user + cpu.system - start_cpu.user - start_cpu.system,
                    "wall_s": time.time() - start_wall,
                }
            )
            + "\n"
        )
    barrier.wait()  # nobody closes its sockets before every rank has received everything
    for s in socks.values():
        s.close()
    return 0


if __name__ == "__main__":
    child_main("traffic.worker", lambda: main(sys.argv[1:]))
