"""The queue + link sampler: one long-lived process polling every configured egress queue over raw rtnetlink.

    /usr/bin/python3 -m testbed.telemetry.sampler --config CONFIG.json --out DIR

It opens one NETLINK_ROUTE socket per namespace (made inside /run/netns/NAME, see ``netns``), then every
1/rate_hz s dumps RTM_GETQDISC in each namespace and writes one ``queues.csv`` row per configured queue
(architecture.md: backlog and drops from the leaf qdisc, overlimits/tx/requeues from the root; marks from RED's
xstats, empty when the leaf cannot report them). At link_hz it dumps RTM_GETSTATS (IFLA_STATS_LINK_64 only: a
fraction of RTM_GETLINK's bytes) into ``links.csv``; at cpu_hz it reads /proc/stat into ``cpu.csv``.

Row policy: a row is written when any counter of that queue/link changed since its last row, or keyframe_s
passed (so an idle queue still shows up every 0.1 s and its last value is exact); rows are formatted as they are
taken into a 1 MiB buffer and flushed every flush_s (0.5 s), so a crash loses at most that much.
SIGINT/SIGTERM: stop, write the last row of every queue, flush, write ``sampler_health.json``; exit 0.
The process prints ``READY`` on stdout (and creates DIR/sampler.ready) once every queue was found.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from testbed.errors import TestbedError
from testbed.host.child import StopFlag, child_main, stop_on_signals
from testbed.spec.schemas import SCHEMAS
from testbed.telemetry.bpfmarks import BpfMarks
from testbed.telemetry.cpu import CPU_HEADER, CpuSampler
from testbed.telemetry.fastpath import LinkFrame, LinkRow, QueueFrame, QueueRow, queue_values
from testbed.telemetry.gaps import GapStats
from testbed.telemetry.netns import run_in_netns
from testbed.telemetry.ports import PortRef, SamplerConfig, node_of
from testbed.telemetry.rtnl import (
    RTM_GETLINK,
    RTM_GETQDISC,
    RTM_GETSTATS,
    RtnlSocket,
    parse_handle,
    parse_link_names,
    parse_qdisc_dump,
)
from testbed.telemetry.senders import SENDERS_HEADER, SenderPoller

__all__ = ["LINKS_HEADER", "QUEUES_HEADER", "NsPoller", "Sampler", "SamplerError", "poll_once", "queue_values"]

QUEUES_HEADER = SCHEMAS["queues"][0]
LINKS_HEADER = SCHEMAS["links"][0]
MARKS_NOTE = (
    "marks: RED leaf -> tc_red_xstats.marked every sample; port with marks_map -> the eBPF marker's per-CPU stats "
    "map summed, refreshed at link_hz; otherwise empty (not 0: nothing on that port counts marks)"
)


class SamplerError(TestbedError, RuntimeError):
    """The sampler cannot sample what it was asked to (a namespace, device or qdisc is missing)."""


# Keyframe checks skipped on an unchanged dump use this much margin, so that rounding can never skip a due one.
_KF_MARGIN = 1e-5


def row_format(node: str, dev: str, values: int) -> str:
    """A row's %-format with node and dev in place: ``fmt % ((t_text,) + values)``, t_text = "%.6f" % t."""
    return ",".join(["%s", node.replace("%", "%%"), dev.replace("%", "%%"), *["%s"] * values]) + "\n"


@dataclass(slots=True)
class _Port:
    ref: PortRef
    leaf_key: tuple[int, int]
    root_key: tuple[int, int] | None
    last: QueueRow | None = None
    last_t: float = 0.0
    missing: int = 0
    bpf_marks: int | None = None
    fmt: str = ""  # row_format of this port
    bpf: bool = False  # marks from the eBPF marker's map (ref.marks_map), not from the dump


@dataclass
class NsPoller:
    """One namespace: its socket, the queues sampled there, the ifindex -> name map for links.

    ``last_buf``/``link_buf`` hold the previous dump's bytes: a dump equal to it changed no counter (the request's
    sequence number is fixed), so no row is due except keyframes, and it is not read at all before ``kf_due``.
    """

    netns: str
    sock: RtnlSocket
    ports: list[_Port]
    names: dict[int, str]
    node: str
    wanted: set[tuple[int, int]] = field(default_factory=set)
    gaps: GapStats = field(default_factory=GapStats)
    link_last: dict[int, tuple[tuple[int, ...], float]] = field(default_factory=dict)
    frame: QueueFrame = field(default_factory=lambda: QueueFrame([]))
    links: LinkFrame = field(default_factory=lambda: LinkFrame(set()))
    link_fmts: dict[int, str] = field(default_factory=dict)
    last_buf: bytes | None = None
    kf_due: float = -math.inf
    link_buf: bytes | None = None
    link_vals: list[tuple[int, LinkRow]] = field(default_factory=list)
    link_kf_due: float = -math.inf

    def __post_init__(self) -> None:
        self.dump_queues = self.sock.dumper(RTM_GETQDISC)
        self.dump_stats = self.sock.dumper(RTM_GETSTATS)
        self.set_ports(self.ports)

    def set_ports(self, ports: list[_Port]) -> None:
        """The queues sampled here (and the links: every interface but lo) -> the frames that read them."""
        self.ports = ports
        self.frame = QueueFrame([(p.leaf_key, p.root_key) for p in ports])
        for p in ports:
            p.fmt = row_format(p.ref.node, p.ref.dev, len(QUEUES_HEADER) - 3)
            p.bpf = bool(p.ref.marks_map)
        links = {idx for idx, name in self.names.items() if name != "lo"}
        self.links = LinkFrame(links)
        self.link_fmts = {idx: row_format(self.node, self.names[idx], len(LINKS_HEADER) - 3) for idx in links}
        self.last_buf = self.link_buf = None

    def poll_queues(self) -> tuple[float, list[tuple[_Port, QueueRow | None]]]:
        """One RTM_GETQDISC dump -> (epoch time, [(port, row values without t or None if its qdisc is gone)])."""
        buf = self.dump_queues()
        t = time.time()
        return t, list(zip(self.ports, self.frame.read(buf), strict=True))

    def poll_links(self) -> tuple[float, list[tuple[int, LinkRow]]]:
        buf = self.dump_stats()
        t = time.time()
        return t, list(self.links.read(buf))


def open_pollers(ports: list[PortRef], links_netns: list[str] | None = None) -> list[NsPoller]:
    """One socket per namespace; resolve every port's ifindex and check that its qdiscs exist (SamplerError)."""
    by_ns: dict[str, list[PortRef]] = {}
    for p in ports:
        by_ns.setdefault(p.netns, []).append(p)
    for ns in links_netns or []:
        by_ns.setdefault(ns, [])
    pollers: list[NsPoller] = []
    try:
        for ns, refs in by_ns.items():
            # ``ctl`` answers the set-up dumps: RTM_GETLINK needs large receives, which would make the kernel size
            # every later dump on ``sock`` for them (rtnl.POLL_RECV)
            sock, ctl = run_in_netns(ns, lambda: (RtnlSocket.create(), RtnlSocket.create()))
            try:
                names = parse_link_names(ctl.dump(RTM_GETLINK))
                setup = ctl.dump(RTM_GETQDISC)
            except BaseException:
                sock.close()
                raise
            finally:
                ctl.close()
            index = {v: k for k, v in names.items()}
            node = refs[0].node if refs else node_of(ns)
            poller = NsPoller(ns, sock, [], names, node)
            pollers.append(poller)
            ports_here = []
            for r in refs:
                if r.dev not in index:
                    raise SamplerError(f"no device {r.dev!r} in namespace {ns!r} (has: {', '.join(index)})")
                i = index[r.dev]
                port = _Port(r, (i, parse_handle(r.leaf)), (i, parse_handle(r.root)) if r.root else None)
                ports_here.append(port)
                poller.wanted.add(port.leaf_key)
                if port.root_key:
                    poller.wanted.add(port.root_key)
            poller.set_ports(ports_here)
            found = parse_qdisc_dump(setup, poller.wanted)
            for port in poller.ports:
                for key, what in ((port.leaf_key, port.ref.leaf), (port.root_key, port.ref.root)):
                    if key is not None and key not in found:
                        raise SamplerError(f"no qdisc {what} on {ns}/{port.ref.dev} (configure it before sampling)")
    except BaseException:
        for pl in pollers:
            pl.sock.close()
        raise
    return pollers


def poll_once(
    ports: list[PortRef], marks_fn: Callable[[], dict[tuple[str, str], int]] | None = None
) -> list[dict[str, Any]]:
    """Sample every queue once (opens and closes the sockets) -> queues.csv rows as dicts. For tests and checks.

    ``marks_fn`` (library mode): returns {(netns, dev): marks}, e.g. from ``MarkerSet.read_marks``; it fills the
    marks of the ports it names.
    """
    extra = marks_fn() if marks_fn is not None else {}
    pollers = open_pollers(ports)
    try:
        rows = []
        for pl in pollers:
            t, vals = pl.poll_queues()
            for port, v in vals:
                if v is None:
                    raise SamplerError(f"qdisc vanished on {pl.netns}/{port.ref.dev}")
                mk = extra.get((port.ref.netns, port.ref.dev))
                if mk is not None:
                    v = (*v[:3], mk, *v[4:])
                rows.append(dict(zip(QUEUES_HEADER, (t, port.ref.node, port.ref.dev, *v), strict=True)))
        return rows
    finally:
        for pl in pollers:
            pl.sock.close()


class _Csv:
    """One table the sampler writes. Rows are formatted with one %-format string (t to the microsecond, then
    each value as str), several times cheaper per row than csv.writer, which matters at the tens of thousands of
    rows a second a busy run writes (docs/bench.md, "The sampler's rows").
    No value needs quoting (node and device names, numbers, or empty)."""

    def __init__(self, path: Path, header: tuple[str, ...]):
        if path.exists() and path.stat().st_size > 0:
            raise SamplerError(f"{path} exists already: a run record is never overwritten")
        if header[0] != "t":
            raise SamplerError(f"{path.name}: the first column must be t, got {header[0]!r}")
        self.fh: IO[str] = open(path, "w", newline="", buffering=1 << 20)  # noqa: SIM115 (closed in close())
        self.fh.write(",".join(header) + "\n")
        self.fmt = "%.6f" + ",%s" * (len(header) - 1) + "\n"
        self.rows = 0

    def row(self, r: tuple[Any, ...]) -> None:
        if None in r:  # an unknown value is an empty cell, as csv.writer wrote it
            r = tuple("" if x is None else x for x in r)
        self.fh.write(self.fmt % r)
        self.rows += 1

    def write(self, lines: list[str]) -> None:
        """Rows formatted already (``row_format``), in one write."""
        self.fh.write("".join(lines))
        self.rows += len(lines)

    def close(self) -> None:
        self.fh.close()


class Sampler:
    """The loop. ``run()`` returns when ``stop`` is set (by a signal handler), after flushing everything."""

    def __init__(self, cfg: SamplerConfig, out: Path, pollers: list[NsPoller] | None = None):
        """``pollers``: already opened ones (tests); by default ``open_pollers`` of the config."""
        self.cfg, self.out = cfg, Path(out)
        self.stop = StopFlag()
        self.pollers = open_pollers(cfg.ports, cfg.links_netns) if pollers is None else pollers
        self.qpollers = [pl for pl in self.pollers if pl.ports]
        self.queues = _Csv(self.out / "queues.csv", QUEUES_HEADER)
        self.links = _Csv(self.out / "links.csv", LINKS_HEADER)
        self.cpu = _Csv(self.out / "cpu.csv", CPU_HEADER) if cfg.cpu_hz > 0 else None
        self.senders: list[SenderPoller] = []
        self.sender_csv = _Csv(self.out / "senders.csv", SENDERS_HEADER) if cfg.senders else None
        self.errors: list[str] = []
        self.late = 0
        self.scheduling = "SCHED_OTHER"
        self.bpf: BpfMarks | None = None
        maps = [p.marks_map for p in cfg.ports if p.marks_map]
        if maps:
            try:
                self.bpf = BpfMarks(maps)
            except Exception as exc:
                self.close()
                raise SamplerError(f"cannot open the eBPF marker's stats maps {maps}: {exc}") from exc
            self._bpf_marks()
        try:
            self.senders = [SenderPoller(r) for r in cfg.senders]
        except Exception as exc:
            self.close()
            raise SamplerError(f"cannot watch the bulk senders' sockets: {exc}") from exc
        self.t0 = self.t_end = 0.0
        self.go_t: float | None = None
        self.gaps_from: float | None = None  # epoch time the gap statistics restarted (the go time), if they did

    def _queues(self, final: bool = False) -> None:
        """One dump per namespace; a row per queue whose values changed since its last row, or whose keyframe is due.

        A dump equal to the namespace's previous one changed nothing (``NsPoller``), so only keyframes can be due,
        and not before ``kf_due`` (the oldest row's time + keyframe_s, less a margin): the values are not read.
        """
        kf = self.cfg.keyframe_s
        lines: list[str] = []
        add = lines.append
        now, mono = time.time, time.monotonic
        for pl in self.qpollers:
            buf = pl.dump_queues()
            t = now()
            pl.gaps.add(mono())
            same = buf == pl.last_buf
            if same and t < pl.kf_due and not final:
                continue
            ts = f"{t:.6f}"
            oldest = math.inf
            if same:
                for port in pl.ports:  # each one's last row holds its values (the previous dump's, as this one)
                    v, lt = port.last, port.last_t
                    if v is not None and (t - lt >= kf or final):
                        add(port.fmt % ((ts,) + v))
                        port.last_t = lt = t
                    if lt < oldest:
                        oldest = lt
            else:
                pl.last_buf = buf
                for port, v in zip(pl.ports, pl.frame.read(buf), strict=True):
                    if v is None:
                        pl.last_buf = None  # read every dump while a qdisc is gone: each one counts as missing
                        port.missing += 1
                        if port.missing == 1:
                            self.errors.append(f"{t:.3f}: qdisc {port.ref.leaf} vanished on {pl.netns}/{port.ref.dev}")
                        continue
                    if port.bpf:
                        v = (*v[:3], "" if port.bpf_marks is None else port.bpf_marks, *v[4:])
                    lt = port.last_t
                    if v != port.last or t - lt >= kf or final:
                        add(port.fmt % ((ts,) + v))
                        port.last = v
                        port.last_t = lt = t
                    if lt < oldest:
                        oldest = lt
            pl.kf_due = oldest + kf - _KF_MARGIN
        if lines:
            self.queues.write(lines)

    def _bpf_marks(self) -> None:
        if self.bpf is not None:
            for pl in self.pollers:
                for port in pl.ports:
                    if port.ref.marks_map:
                        m = self.bpf.read(port.ref.marks_map)
                        if m != port.bpf_marks:  # not in the dump: its next one is read even if unchanged
                            port.bpf_marks = m
                            pl.last_buf = None

    def _links(self, final: bool = False) -> None:
        """Like ``_queues`` for every interface but lo, from one RTM_GETSTATS dump per namespace."""
        kf = self.cfg.keyframe_s
        self._bpf_marks()
        lines: list[str] = []
        add = lines.append
        now = time.time
        for pl in self.pollers:
            buf = pl.dump_stats()
            t = now()
            same = buf == pl.link_buf
            if same and t < pl.link_kf_due and not final:
                continue
            if not same:
                pl.link_buf, pl.link_vals = buf, pl.links.read(buf)
            ts = f"{t:.6f}"
            oldest = math.inf
            last, fmts = pl.link_last, pl.link_fmts
            for idx, v in pl.link_vals:
                prev = last.get(idx)
                if final or prev is None or prev[0] != v or t - prev[1] >= kf:
                    add(fmts[idx] % ((ts,) + v))
                    last[idx] = prev = (v, t)
                if prev[1] < oldest:
                    oldest = prev[1]
            pl.link_kf_due = oldest + kf - _KF_MARGIN
        if lines:
            self.links.write(lines)

    def _check_go(self) -> None:
        """Once the go time has passed, restart the gap statistics: the guardrail judges the sampling of the measured
        window, not of the set-up before it (in the TCG guest, starting iperf3 stalled the sampler for 1.2 s)."""
        if self.go_t is None:
            try:
                self.go_t = float(Path(str(self.cfg.go_file)).read_text())  # written whole (os.replace)
            except (OSError, ValueError):
                return
        if time.time() >= self.go_t:
            for pl in self.pollers:
                pl.gaps = GapStats()
            self.gaps_from = self.go_t

    def _senders(self) -> None:
        if self.sender_csv is not None:
            t, mono = time.time(), time.monotonic()
            may_dump = True  # one namespace dumps per tick (senders.py)
            for sp in self.senders:
                dump = may_dump and sp.due(mono)
                for r in sp.poll(t, mono, may_dump=dump):
                    self.sender_csv.row(r)
                may_dump = may_dump and not dump

    def run(self) -> None:
        cfg = self.cfg
        period, link_period = 1.0 / cfg.rate_hz, 1.0 / cfg.link_hz
        sender_period = 1.0 / cfg.sender_hz
        cpu_period, flush_period = (1.0 / cfg.cpu_hz if cfg.cpu_hz else math.inf), cfg.flush_s
        cpu = CpuSampler()
        cpu.sample()
        self.ru0 = resource.getrusage(resource.RUSAGE_SELF)
        self.t0 = now = time.monotonic()
        nxt = next_link = next_cpu = next_flush = next_sender = now
        next_cpu += cpu_period
        next_flush += flush_period
        while not self.stop.is_set():
            self._queues()
            now = time.monotonic()
            if now >= next_link:
                self._links()
                next_link += link_period
                if self.cfg.go_file and self.gaps_from is None:
                    self._check_go()
            if now >= next_sender and self.senders:
                self._senders()
                next_sender += sender_period
            if now >= next_cpu and self.cpu is not None:
                for r in cpu.sample():
                    self.cpu.row(r)
                next_cpu += cpu_period
            if now >= next_flush:
                self.flush()
                next_flush += flush_period
            nxt += period
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -period:  # fell more than a period behind: count it, do not burst to catch up
                self.late += 1
                nxt = time.monotonic()
        self.t_end = time.monotonic()
        self.ru1 = resource.getrusage(resource.RUSAGE_SELF)
        self._queues(final=True)
        self._links(final=True)
        self.flush()

    def flush(self) -> None:
        for f in (self.queues, self.links, self.cpu, self.sender_csv):
            if f is not None:
                f.fh.flush()
        self.write_health(final=False)

    def health(self, final: bool) -> dict[str, Any]:
        wall = (self.t_end if final else time.monotonic()) - self.t0
        ru = self.ru1 if final else resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = (ru.ru_utime + ru.ru_stime) - (self.ru0.ru_utime + self.ru0.ru_stime)
        per_ns = {pl.netns: pl.gaps.summary() for pl in self.pollers if pl.ports}
        rates = [s["rate_hz"] for s in per_ns.values()]
        jit = [s["jitter"] for s in per_ns.values()]
        return {
            "status": "stopped" if final else "running",
            "target_hz": self.cfg.rate_hz,
            "duration_s": round(wall, 3),
            "rate_hz_min": min(rates) if rates else 0.0,
            "jitter_max": max(jit) if jit else 0.0,
            "cpu_share": round(cpu_s / wall, 4) if wall > 0 else 0.0,  # of one core
            "late_ticks": self.late,
            "scheduling": self.scheduling,
            "jitter_definition": "stddev/mean of the gap between consecutive dumps of a namespace",
            "gaps_from": self.gaps_from,  # None: over the sampler's whole life
            "queues": len(self.cfg.ports),
            "namespaces": len(per_ns),
            "per_netns": per_ns,
            "rows": {
                "queues": self.queues.rows,
                "links": self.links.rows,
                "cpu": self.cpu.rows if self.cpu else 0,
                "senders": self.sender_csv.rows if self.sender_csv else 0,
            },
            "senders": {sp.ref.node: {"dumps": sp.dumps, "lookups": sp.lookups} for sp in self.senders},
            "row_policy": f"a row when a counter changed or every {self.cfg.keyframe_s:g} s; flushed every "
            f"{self.cfg.flush_s:g} s",
            "marks": MARKS_NOTE,
            "missing_samples": {
                f"{pl.netns}/{p.ref.dev}": p.missing for pl in self.pollers for p in pl.ports if p.missing
            },
            "errors": self.errors[:50],
            "config": self.cfg.to_dict(),
        }

    def write_health(self, final: bool) -> dict[str, Any]:
        h = self.health(final) if self.t0 else {"status": "starting"}
        tmp = self.out / "sampler_health.json.tmp"
        tmp.write_text(json.dumps(h, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.out / "sampler_health.json")
        return h

    def close(self) -> None:
        for f in (self.queues, self.links, self.cpu, self.sender_csv):
            if f is not None:
                f.close()
        for pl in self.pollers:
            pl.sock.close()
        for sp in self.senders:
            sp.close()
        if self.bpf is not None:
            self.bpf.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m testbed.telemetry.sampler", description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = SamplerConfig.load(args.config)
    args.out.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(cfg, args.out)

    sampler.stop = stop_on_signals()
    if cfg.rt_priority:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(cfg.rt_priority))
            sampler.scheduling = f"SCHED_FIFO {cfg.rt_priority}"
        except OSError as exc:  # recorded in the health file; the measured jitter shows the consequence
            sampler.scheduling = f"SCHED_OTHER (SCHED_FIFO {cfg.rt_priority} refused: {exc.strerror})"
    try:
        (args.out / "sampler.ready").write_text(f"{os.getpid()}\n")
        print("READY", flush=True)
        sampler.run()
        sampler.write_health(final=True)
    finally:
        sampler.close()
    return 0


if __name__ == "__main__":
    child_main("sampler", main)
