"""The PFC controller process: ``python3 -m testbed.pfc.controller --config F --out DIR``.

It loads ``pfc.bpf.o`` (testbed/bpf/src/pfc.bpf.c), tells it the run's lossless queues, their thresholds and the
routers' ingress ports, and waits on the program's ring buffer (epoll: nothing runs between events). An XOFF
event names a queue and the ingress ports that fed it: each one's upstream port pauses the class (its tbf slowed
to a crawl by one netlink request from a socket inside that namespace). The XON event resumes every upstream port
no other queue still holds, and restarts its dequeue with one 60-byte frame through HTB's direct queue (Linux runs
a qdisc again only on an enqueue or its own timer, and a resumed tbf has neither).

On SIGINT it resumes every paused port, then writes ``pauses.csv`` (one row per pause of an upstream port) and
``pfc.json`` (reaction times from the crossing in the kernel to the acknowledged change, its CPU, the queues).
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import json
import os
import resource
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pyroute2 import IPRoute

from testbed.bpf.libbpf import RingCallback, open_libbpf
from testbed.fabric.tc import PFC_PAUSE_RATE_BPS, PFC_RUN_RATE_FACTOR
from testbed.host.child import child_main, stop_on_signals
from testbed.pfc.book import PauseBook
from testbed.pfc.errors import PfcError
from testbed.pfc.tbfmsg import ack_error, tbf_change
from testbed.spec.schemas import SCHEMAS
from testbed.telemetry.netns import netns_path, run_in_netns

OBJECT = Path(__file__).resolve().parents[2] / "build" / "bpf" / "pfc.bpf.o"
PROGRAMS = ("pfc_enqueue", "pfc_dequeue")
IDLE_CHECK_MS = 50  # a quiet ring this long: check that every queue holding ports is still over XON (longer than
# a full 200 KB queue takes to drain at 50 Mbit/s, so a draining queue is seldom read)
EVENT = struct.Struct("<QQIIII")  # pfc.bpf.c's struct event: ts, feeders, backlog, id, kind, pad
# struct queue_state: feeders, paused, id, xoff, xon, peak, crossings, lost, no_leaf
QUEUE = struct.Struct("<QIIIIQQQQ")
SO_PRIORITY_DIRECT = 0x10000  # skb->priority 1:0, HTB's own handle: its direct queue, no class counts it
# a PFC frame (802.1Qbb MAC control, opcode 0x0101) with every quantum 0, i.e. "resume": the peer drops it
KICK_FRAME = bytes.fromhex("0180c2000001") + bytes(6) + bytes.fromhex("88080101") + bytes(46)


@dataclass(frozen=True)
class Upstream:
    """An upstream port that pauses, and its sockets in its namespace."""

    feed: dict[str, Any]
    nl: socket.socket
    kick: socket.socket
    ifindex: int


def _ino(ns: str) -> int:
    return os.stat(netns_path(ns)).st_ino


def _ifindex(ns: str, dev: str) -> int:
    return int(run_in_netns(ns, lambda: socket.if_nametoindex(dev)))


class Controller:
    def __init__(self, queues: list[dict[str, Any]], feeds: list[dict[str, Any]], obj: Path = OBJECT):
        if not obj.exists():
            raise PfcError(f"{obj} is missing: build it with `python3 -m testbed.bpf.build`")
        self.lib = open_libbpf()
        self.wall_offset = time.time() - time.monotonic()
        self.queues = queues
        self.reactions_ns: list[int] = []
        self.seq = 0
        self.errors: list[str] = []
        self.ups = [self._open(f) for f in feeds]
        self.book = PauseBook(len(self.ups))
        self.by_bit = {(f["router"], f["cls"], f["bit"]): i for i, f in enumerate(feeds)}
        self.qkeys: list[bytes] = []  # each queue's key in the program's `queues` map
        self.repaired: list[dict[str, Any]] = []  # pauses the idle check ended (_check_held)
        self.routers: dict[str, Any] = {}  # router namespace -> a pyroute2 IPRoute opened inside it
        self.qifindex: list[int] = []  # each queue's device index in its router
        o = self.lib.bpf_object__open_file(os.fsencode(str(obj)), None)
        if not o or self.lib.bpf_object__load(o) != 0:
            raise PfcError(
                f"the kernel refused pfc.bpf.o ({os.strerror(ctypes.get_errno())}): it needs BTF and tp_btf programs "
                "on the qdisc_enqueue and qdisc_dequeue tracepoints"
            )
        self.obj = o
        self.fd = {n: self.lib.bpf_map__fd(self.lib.bpf_object__find_map_by_name(o, n.encode()))
                   for n in ("classes", "ingress", "queues", "events")}  # fmt: skip
        self._fill(feeds)
        self.links = []
        for name in PROGRAMS:
            link = self.lib.bpf_program__attach(self.lib.bpf_object__find_program_by_name(o, name.encode()))
            if not link or self.lib.libbpf_get_error(link):
                raise PfcError(f"cannot attach {name}: {os.strerror(ctypes.get_errno())}")
            self.links.append(link)
        self._cb = RingCallback(self._on_event)  # kept: libbpf calls it until the ring is freed
        self.ring = self.lib.ring_buffer__new(self.fd["events"], self._cb, None, None)
        if not self.ring:
            raise PfcError(f"cannot open the event ring: {os.strerror(ctypes.get_errno())}")

    def _put(self, m: str, key: bytes, value: bytes, what: str) -> None:
        if self.lib.bpf_map_update_elem(self.fd[m], key, value, 0) != 0:
            raise PfcError(f"cannot add {what} to the program: {os.strerror(ctypes.get_errno())}")

    def _fill(self, feeds: list[dict[str, Any]]) -> None:
        for i, q in enumerate(self.queues):
            ino = _ino(q["router_netns"])
            for d in q["dscp"]:
                self._put("classes", struct.pack("<II", ino, d), struct.pack("<I", q["minor"]), f"DSCP {d}")
            key = struct.pack("<IIII", ino, _ifindex(q["router_netns"], q["dev"]), q["minor"], 0)
            self._put("queues", key, QUEUE.pack(0, 0, i, q["xoff"], q["xon"], 0, 0, 0, 0), f"queue {q['router']}")
            self.qkeys.append(key)
            self.qifindex.append(_ifindex(q["router_netns"], q["dev"]))
        for f in feeds:
            key = struct.pack("<II", _ino(f["router_netns"]), _ifindex(f["router_netns"], f["ingress_dev"]))
            self._put("ingress", key, struct.pack("<I", f["bit"]), f"ingress {f['router']}:{f['ingress_dev']}")

    def _open(self, f: dict[str, Any]) -> Upstream:
        def sockets() -> tuple[socket.socket, socket.socket, int]:
            nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
            nl.bind((0, 0))
            kick = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            kick.bind((f["upstream_dev"], 0))
            kick.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, SO_PRIORITY_DIRECT)
            return nl, kick, socket.if_nametoindex(f["upstream_dev"])

        return Upstream(f, *run_in_netns(f["upstream_netns"], sockets))

    def _set(self, up: Upstream, paused: bool) -> None:
        """Pause or resume the upstream class; returns when the kernel acknowledged it."""
        f = up.feed
        self.seq += 1
        rate = PFC_PAUSE_RATE_BPS if paused else PFC_RUN_RATE_FACTOR * f["rate_bps"]
        minor = f["upstream_minor"]
        up.nl.send(tbf_change(self.seq, up.ifindex, 0x10000 | minor, minor << 16, rate, f["frame"], f["buffer"]))
        while (err := ack_error(up.nl.recv(65536), self.seq)) is None:
            pass
        if err:
            raise PfcError(f"{f['upstream']}:{f['upstream_dev']} class 1:{minor:x}: tbf change: {os.strerror(err)}")
        if not paused:
            up.kick.send(KICK_FRAME)

    def _now(self) -> float:
        return time.monotonic_ns() / 1e9 + self.wall_offset

    def _state(self, qid: int) -> tuple[bool, int]:
        """The queue's state in the program now: paused, and the feeders since its last XON."""
        raw = ctypes.create_string_buffer(QUEUE.size)
        if self.lib.bpf_map_lookup_elem(self.fd["queues"], self.qkeys[qid], raw) != 0:
            raise PfcError(f"queue {qid} is gone from the program's map: {os.strerror(ctypes.get_errno())}")
        feeders, paused = QUEUE.unpack(raw.raw)[:2]
        return bool(paused), feeders

    def _on_event(self, _ctx: Any, data: int, size: int) -> int:
        """Act on the queue's state as the program holds it now, not on the event's kind: two CPUs' events of one
        queue can reach the ring in the other order than their crossings, and the program's state is the later."""
        ts, feeders, backlog, qid, _kind, _ = EVENT.unpack(ctypes.string_at(data, EVENT.size))
        q = self.queues[qid]
        try:
            paused, now_feeding = self._state(qid)
            if paused:
                feeders |= now_feeding
                for bit in range(64):
                    i = self.by_bit.get((q["router"], q["cls"], bit)) if feeders >> bit & 1 else None
                    if i is None or self.ups[i].feed["upstream"] == q["peer"] or not self.book.hold(i, qid):
                        continue
                    self._set(self.ups[i], True)
                    done = time.monotonic_ns()
                    self.reactions_ns.append(done - ts)
                    self.book.paused(i, done / 1e9 + self.wall_offset, self._row(i, q, backlog, done - ts))
            else:
                for i in self.book.release(qid):
                    self._set(self.ups[i], False)
                    self.book.resumed(i, self._now())
        except (OSError, PfcError) as exc:
            self.errors.append(str(exc))
        return 0

    def _row(self, i: int, q: dict[str, Any], backlog: int, reaction_ns: int) -> dict[str, Any]:
        f = self.ups[i].feed
        return {"port": f"{f['upstream']}->{f['router']}", "node": f["upstream"], "dev": f["upstream_dev"],
                "router": f["router"], "class": f["cls"], "queue": f"{q['router']}->{q['peer']}",
                "backlog_bytes": backlog, "reaction_us": round(reaction_ns / 1e3, 1)}  # fmt: skip

    def run(self, stop: Callable[[], bool], ready: Path) -> None:
        ready.write_text("ready\n")
        while not stop():
            n = self.lib.ring_buffer__poll(self.ring, IDLE_CHECK_MS)
            if n < 0 and not stop():
                err = ctypes.get_errno()
                if err != 4:  # EINTR: the stop signal
                    raise PfcError(f"ring buffer poll failed: {os.strerror(err)}")
            elif n == 0:
                try:
                    self._check_held()
                except (OSError, PfcError) as exc:  # recorded (the pfc check fails on it); events still count
                    self.errors.append(str(exc))

    def _check_held(self) -> None:
        """After IDLE_CHECK_MS without an event: a queue holding ports whose real backlog (its leaf qdisc, read
        over netlink) is under XON, or that the program no longer holds paused, will send no resume event: the
        tracepoints did not see the dequeues that drained it, and without a resume the fabric deadlocks
        (docs/bench.md, "The PFC controller's repair"). Resume its ports, clear the program's pause,
        and count it in the manifest's ``pfc.repaired_pauses``."""
        for qid in sorted({q for p in self.book.ports for q in p.holders}):
            q = self.queues[qid]
            paused, _ = self._state(qid)
            if paused and self._backlog(qid) >= q["xon"]:
                continue
            self.repaired.append(
                {"queue": f"{q['router']}->{q['peer']}", "t": round(self._now(), 6), "program_paused": paused}
            )
            self._unpause(qid)
            for i in self.book.release(qid):
                self._set(self.ups[i], False)
                self.book.resumed(i, self._now())

    def _backlog(self, qid: int) -> int:
        """The queue's leaf qdisc backlog in bytes, as the kernel reports it over netlink."""
        q = self.queues[qid]
        ns = q["router_netns"]
        if ns not in self.routers:
            self.routers[ns] = run_in_netns(ns, IPRoute)
        for m in self.routers[ns].get_qdiscs(index=self.qifindex[qid]):
            if m["handle"] == q["minor"] << 16:
                stats = m.get_attr("TCA_STATS2")
                queue = stats.get_attr("TCA_STATS_QUEUE") if stats else None
                return int(queue["backlog"]) if queue else 0
        raise PfcError(f"{q['router']}:{q['dev']}: the class leaf {q['minor']:x}: is gone")

    def _unpause(self, qid: int) -> None:
        """Clear the program's pause of the queue (and its feeders): the queue is idle, so nothing races this."""
        raw = ctypes.create_string_buffer(QUEUE.size)
        if self.lib.bpf_map_lookup_elem(self.fd["queues"], self.qkeys[qid], raw) == 0:
            fields = list(QUEUE.unpack(raw.raw))
            fields[0], fields[1] = 0, 0  # feeders, paused
            self._put("queues", self.qkeys[qid], QUEUE.pack(*fields), f"queue {qid}")

    def _queue_states(self) -> list[dict[str, Any]]:
        out = []
        for q, key in zip(self.queues, self.qkeys, strict=True):
            raw = ctypes.create_string_buffer(QUEUE.size)
            if self.lib.bpf_map_lookup_elem(self.fd["queues"], key, raw) == 0:
                _, _, _, _, _, peak, crossings, lost, no_leaf = QUEUE.unpack(raw.raw)
                out.append({"queue": f"{q['router']}->{q['peer']}", "class": q["cls"], "xoff": q["xoff"],
                            "xon": q["xon"], "peak_bytes": peak, "crossings": crossings, "lost_events": lost,
                            "unjudged_packets": no_leaf})  # fmt: skip
        return out

    def finish(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Detach, resume whatever is paused; the pause rows and the summary."""
        for link in self.links:
            self.lib.bpf_link__destroy(link)
        self.lib.ring_buffer__poll(self.ring, 0)
        for i in self.book.still_paused():
            try:
                self._set(self.ups[i], False)
            except (OSError, PfcError) as exc:  # its namespace gone: nothing is left to resume
                self.errors.append(str(exc))
        rows = self.book.end(self._now())
        states = self._queue_states()
        for ipr in self.routers.values():
            ipr.close()
        self.lib.ring_buffer__free(self.ring)
        self.lib.bpf_object__close(self.obj)
        r = np.array(self.reactions_ns, dtype=float) / 1e3
        usage = resource.getrusage(resource.RUSAGE_SELF)
        reaction: dict[str, Any] = {"n": int(r.size)}
        if r.size:
            reaction |= {"p50": round(float(np.median(r)), 1), "p99": round(float(np.percentile(r, 99)), 1),
                         "max": round(float(r.max()), 1)}  # fmt: skip
        summary = {
            "queues": len(self.queues),
            "upstream_ports": len(self.ups),
            "pauses": len(rows),
            "reaction_us": reaction,
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "lost_events": sum(s["lost_events"] for s in states),
            "repaired_pauses": len(self.repaired),
            "repairs": self.repaired[:20],
            "unjudged_packets": sum(s["unjudged_packets"] for s in states),
            "queue_states": states,
            "errors": self.errors[:10],
        }
        return rows, summary


def write(out: Path, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    cols = SCHEMAS["pauses"][0]
    with open(out / "pauses.csv", "x", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(cols))
        w.writeheader()
        w.writerows(sorted(rows, key=lambda r: r["t_start"]))
    (out / "pfc.json").write_text(json.dumps(summary, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m testbed.pfc.controller", description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = json.loads(args.config.read_text())
    stop = stop_on_signals()
    ctl = Controller(cfg["queues"], cfg["feeds"])
    try:
        ctl.run(stop.is_set, args.out / "pfc.ready")
    finally:
        rows, summary = ctl.finish()
        write(args.out, rows, summary)
    return 0


if __name__ == "__main__":
    child_main("pfc", main)
