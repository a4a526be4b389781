"""Why a flow stalled: stalls.csv's rows grouped into stalls, each given the first cause its record supports.

stalls.csv (the rank workers' watchdog, ``traffic.watchdog``) has a row for each side of a flow that made no
progress for longer than two RTOs. Rows of one flow (``flow_id``) whose windows overlap are one stall. Its causes,
in the order they are chosen:

1. ``link event``: a scheduled link event or a reroute (link_events.csv) from one bound before the stall to its
   end. The experiment made it.
2. ``pfc pause``: a PFC pause (pauses.csv) over the stall on a port of the flow's path. The experiment made it.
3. ``drops and RTO``: a queue on the flow's path dropped packets (queues.csv ``drops`` rose from one bound before
   the stall to its end). The experiment's congestion made it.
4. ``machine-wide stall``: the sampler wrote no row (queues.csv, links.csv, cpu.csv) for at least
   ``stall_gap_share`` of the stall, or a CPU did not run (cpu_stalls.csv) for that long: the machine stopped.
5. ``worker waited on memory``: the stalled worker took major page faults during the stall (a page it touched
   had to be read in), or the machine did (the watchdog's ``Proc.majflt`` and ``Vm.pgmajfault``).
6. ``receiver did not read``: the receiving socket held unread bytes (``queued_bytes`` of a receive), or the sender
   saw a window with no room for a segment, or sent window probes: the data was there and the worker did not take
   it.
7. ``drops and RTO``: the sender's TCP_INFO shows timeouts, lost or retransmitted segments during the stall, the
   receiver got packets out of order, or the sending host's netstat counted retransmission timeouts in the run
   (the weakest sign: it is the whole run's).
8. ``queue held packets``: a port of the flow's path held packets and sent less than a frame over the stall: the
   emulated link stopped.
9. ``machine-wide stall``: flows that share no host stalled too and resumed within two watchdog ticks of this one,
   none of them with a sign of loss.
10. otherwise ``unexplained``.

The flow's path is its flows.csv ``path``; without one, the ports it may cross in a leaf-spine fabric.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from results.checks import Rows, Thresholds, as_frame
from results.ports import PortRows, split_ports
from results.tables import numbers
from testbed.spec.link import ETH_HEADER
from traffic.watchdog import INTERVAL_S

EXPERIMENT = ("link event", "pfc pause", "drops and RTO")
SIMULTANEOUS_S = 2 * INTERVAL_S  # a send stall's end is known to one watchdog tick at each of two ranks


@dataclass(frozen=True)
class StallTables:
    """What the stall guardrails read besides the sampler's tables: the record's tables as frames or row dicts."""

    stalls: Rows = ()
    iterations: Rows = ()
    flows: Rows = ()
    fct: Rows = ()
    link_events: Rows = ()
    pauses: Rows = ()
    netstat: Rows = ()
    cpu_stalls: Rows = ()
    ports: Sequence[Mapping[str, Any]] = field(default_factory=tuple)  # manifest fabric.ports, every port


def _f(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return x


def _when(t: float, t0: float) -> str:
    return f"{t - t0:+.3f} s"


# --- the flow's path ----------------------------------------------------------------------------------------------
def path_ports(path: str, ports: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The egress ports a path (``a>b>c``, flows.csv) crosses: each node's port towards the next."""
    dev = {(str(p["node"]), str(p.get("peer"))): str(p["dev"]) for p in ports}
    nodes = [n for n in path.split(">") if n]
    return [(a, dev[(a, b)]) for a, b in itertools.pairwise(nodes) if (a, b) in dev]


def possible_ports(src: str, dst: str, ports: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Without a recorded path, the ports a flow from ``src`` to ``dst`` may cross in a leaf-spine fabric: the
    sender's port, its leaf's port to ``dst`` (same leaf) or its leaf's uplinks, the ports into ``dst``'s leaf and
    that leaf's port to ``dst``."""
    leaf_of = {str(p["node"]): str(p.get("peer")) for p in ports if p.get("layer") == "host"}
    a, b = leaf_of.get(src), leaf_of.get(dst)
    out = []
    for p in ports:
        node, peer, key = str(p["node"]), str(p.get("peer")), (str(p["node"]), str(p["dev"]))
        ends = node == src or (node == b and peer == dst)
        into_b = peer == b and p.get("layer") != "host"
        if ends or (a != b and ((node == a and p.get("direction") == "up") or into_b)):
            out.append(key)
    return out


# --- evidence -----------------------------------------------------------------------------------------------------
def _at(rows: PortRows, col: str, t: float) -> float:
    """A cumulative column's value at time ``t`` (the last row at or before it; the first row when none)."""
    i = int(np.searchsorted(rows["t"], t, side="right")) - 1
    v = rows[col]
    return float(v[max(i, 0)]) if len(v) else float("nan")


def rise(rows: PortRows, col: str, t0: float, t1: float) -> float:
    d = _at(rows, col, t1) - _at(rows, col, t0)
    return 0.0 if np.isnan(d) else d


def _held(rows: PortRows, t0: float, t1: float, frame: int) -> bool:
    """The port held packets from ``t0`` to ``t1`` (every row then, and the one before, non-empty) and sent less
    than a frame."""
    t = rows["t"]
    i0 = max(int(np.searchsorted(t, t0, side="right")) - 1, 0)
    i1 = int(np.searchsorted(t, t1, side="right"))
    pk = rows["backlog_pkts"][i0:i1]
    if i1 - i0 < 2 or not (pk > 0).all():
        return False
    return rise(rows, "tx_bytes", t0, t1) < frame


def _gaps(times: np.ndarray, longer_than: float) -> np.ndarray:
    """(start, end) of every gap between consecutive distinct times longer than ``longer_than``."""
    t = np.unique(times[~np.isnan(times)])
    if len(t) < 2:
        return np.empty((0, 2))
    d = np.diff(t)
    big = d > longer_than
    return np.column_stack((t[:-1][big], t[1:][big]))


def overlap(spans: np.ndarray, t0: float, t1: float) -> float:
    if not len(spans):
        return 0.0
    return float(np.clip(np.minimum(spans[:, 1], t1) - np.maximum(spans[:, 0], t0), 0.0, None).sum())


@dataclass
class Stall:
    """One stall of one flow: the rows of its sides whose windows overlap."""

    job: str
    flow_id: str
    src: str
    dst: str
    iter: int
    step: int
    t_start: float
    t_end: float  # NaN: it never resumed (the job ended or timed out)
    t_seen: float  # the last time it is known to have stalled (its end, else its detection)
    t_resume: float  # the first side to see progress again (a receiver's clock reading beats a send side's tick)
    bound_s: float
    rows: list[dict[str, Any]]
    cause: str = "unexplained"
    evidence: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start

    @property
    def hosts(self) -> set[str]:
        return {self.src, self.dst}

    def describe(self) -> str:
        dur = f"{self.duration_s:.2f} s" if not np.isnan(self.t_end) else "until the job ended"
        return f"job {self.job} iter {self.iter} step {self.step} {self.src}->{self.dst} stalled {dur}"


def stalls_of(rows: pd.DataFrame) -> list[Stall]:
    """stalls.csv rows grouped into stalls: one flow's rows whose windows overlap are one stall."""
    out: list[Stall] = []
    if rows.empty:
        return out
    recs = rows.to_dict("records")
    by_flow: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        by_flow.setdefault(str(r["flow_id"]), []).append(r)
    for fid, rs in sorted(by_flow.items()):
        rs.sort(key=lambda r: _f(r["t_start"]))
        cur: Stall | None = None
        for r in rs:
            t0, t1 = _f(r["t_start"]), _f(r.get("t_end"))
            seen = t1 if not np.isnan(t1) else _f(r["t_detect"])
            src, dst = (str(r["rank"]), str(r["peer"])) if r["side"] == "send" else (str(r["peer"]), str(r["rank"]))
            if cur is not None and t0 <= cur.t_seen:
                cur.rows.append(r)
                cur.t_end = np.nan if np.isnan(t1) or np.isnan(cur.t_end) else max(cur.t_end, t1)
                cur.t_seen = max(cur.t_seen, seen)
                cur.t_resume = float(np.fmin(cur.t_resume, t1))
                cur.bound_s = max(cur.bound_s, _f(r["bound_s"]))
                continue
            it, step = int(_f(r["iter"])), int(_f(r["step"]))
            cur = Stall(str(r["job"]), fid, src, dst, it, step, t0, t1, seen, t1, _f(r["bound_s"]), [r])
            out.append(cur)
    return out


def _tcp_loss(st: Stall) -> list[str]:
    """Signs of loss in the stalled sockets' own TCP_INFO."""
    out = []
    for r in st.rows:
        if r["side"] == "send":
            signs = {
                "timeouts": max(_f(r.get("retransmits")), _f(r.get("retransmits_max"))),
                "retransmitted": _f(r.get("retrans_during")),
                "timeouts counted": _f(r.get("rto_during")),
                "lost": _f(r.get("lost")),
            }
        else:
            signs = {"out-of-order packets": _f(r.get("ooo_during"))}
        seen = [f"{k} {v:g}" for k, v in signs.items() if v > 0]
        if seen:
            out.append(f"{r['side']} side TCP_INFO: " + ", ".join(seen))
    return out


def _faults(st: Stall) -> list[str]:
    """Major page faults while the flow stalled: the stalled worker's own (``Proc.majflt``), or the machine's
    (``Vm.pgmajfault``), from the watchdog's counters."""
    out = []
    for r in st.rows:
        changed = dict(kv.split("=", 1) for kv in str(r.get("counters_during") or "").split() if "=" in kv)
        mine, machine = _f(changed.get("Proc.majflt")), _f(changed.get("Vm.pgmajfault"))
        if mine > 0:
            out.append(f"{r['rank']} ({r['side']}) took {mine:.0f} major page faults during the stall")
        elif machine > 0:
            out.append(f"the machine took {machine:.0f} major page faults during {r['rank']}'s stall")
    return out


def _not_read(st: Stall) -> list[str]:
    out = []
    for r in st.rows:
        if r["side"] == "recv" and _f(r.get("queued_bytes")) > 0:
            out.append(f"{r['rank']} held {_f(r['queued_bytes']):.0f} unread bytes in its socket")
        closed = _f(r.get("snd_wnd")) < max(_f(r.get("snd_mss")), 1.0)  # no room for a segment: SWS avoidance waits
        probed = max(_f(r.get("probes")), _f(r.get("probes_max"))) > 0
        if r["side"] == "send" and (closed or probed):
            out.append(f"{r['peer']}'s receive window held {r['rank']}" + (" (window probes)" if probed else ""))
    return out


class Judge:
    """Evidence about stalls from one run's tables, read once."""

    def __init__(self, tabs: StallTables, queues: pd.DataFrame, links: pd.DataFrame, cpu: pd.DataFrame, th: Thresholds):
        self.th, self.ports = th, list(tabs.ports)
        self.queues = split_ports(queues, ("drops", "backlog_pkts", "tx_bytes"))
        self.frames = {(str(p["node"]), str(p["dev"])): int(p.get("mtu") or 1500) + ETH_HEADER for p in self.ports}
        fl = as_frame(tabs.flows)
        pairs = zip(fl["flow_id"], fl["path"]) if not fl.empty and "path" in fl else ()
        self.paths = {str(a): str(b) for a, b in pairs if isinstance(b, str) and b}
        times = np.concatenate([numbers(df, "t").to_numpy() for df in (queues, links, cpu)])
        self.sampler_gaps = _gaps(times, 2 * th.keyframe_s)
        cs = as_frame(tabs.cpu_stalls)
        # a canary's wake-up due at t came late_s late, stalled_s of it not spent waiting to run: the CPU stopped
        # for stalled_s before the wake-up at t + late_s
        t, late, lost = (numbers(cs, c).to_numpy() for c in ("t", "late_s", "stalled_s"))
        ok = ~np.isnan(t) & ~np.isnan(late) & ~np.isnan(lost)
        woke = t[ok] + late[ok]
        self.cpu_stalls = np.column_stack((woke - lost[ok], woke))
        le = as_frame(tabs.link_events)
        self.link_events = [
            (float(t), str(e), str(lk)) for t, e, lk in zip(numbers(le, "t"), column(le, "event"), column(le, "link"))
        ]
        pa = as_frame(tabs.pauses)
        self.pauses = [
            ((str(n), str(d)), float(a), float(b))
            for n, d, a, b in zip(column(pa, "node"), column(pa, "dev"), numbers(pa, "t_start"), numbers(pa, "t_end"))
        ]
        self.timeouts = _run_counter(as_frame(tabs.netstat), "TcpExt.TCPTimeouts")

    def ports_of(self, st: Stall) -> tuple[list[tuple[str, str]], str]:
        """The ports of the flow's path (flows.csv), else those it may cross, and how to say which."""
        path = self.paths.get(st.flow_id)
        if path:
            return path_ports(path, self.ports), ""
        return possible_ports(st.src, st.dst, self.ports), " (a port it may cross)"

    def evidence(self, st: Stall, every: Sequence[Stall]) -> list[tuple[str, list[str]]]:
        """(cause, what shows it) in the order causes are chosen."""
        t0, t1, early = st.t_start, st.t_seen, st.t_start - st.bound_s
        ports, where = self.ports_of(st)
        share = self.th.stall_gap_share * max(t1 - t0, 1e-9)
        events = [f"{e} {lk} at {_when(t, t0)}" for t, e, lk in self.link_events if early <= t <= t1]
        paused = [
            f"PFC paused {n}:{d}{where} from {_when(a, t0)} to {_when(b, t0)}"
            for (n, d), a, b in self.pauses
            if (n, d) in ports and a <= t1 and b >= t0
        ]
        drops = [(p, rise(self.queues[p], "drops", early, t1)) for p in ports if p in self.queues]
        gap, cpu = overlap(self.sampler_gaps, t0, t1), overlap(self.cpu_stalls, t0, t1)
        machine = [f"the sampler wrote no row for {gap:.2f} s of it"] if gap >= share else []
        machine += [f"a CPU did not run for {cpu:.2f} s of it (cpu_stalls.csv)"] if cpu >= share else []
        lossy = _tcp_loss(st)
        if not lossy and self.timeouts.get(st.src, 0) > 0:
            lossy = [f"{st.src} counted {self.timeouts[st.src]:.0f} retransmission timeouts in the run (netstat)"]
        held = [
            f"{n}:{d}{where} held packets and sent nothing"
            for n, d in ports
            if (n, d) in self.queues and _held(self.queues[(n, d)], t0, t1, self.frames.get((n, d), 9014))
        ]
        return [
            ("link event", [f"link event {e}" for e in events]),
            ("pfc pause", paused),
            ("drops and RTO", [f"{n}:{d}{where} dropped {v:.0f} packets" for (n, d), v in drops if v > 0]),
            ("machine-wide stall", machine),
            ("worker waited on memory", _faults(st)),
            ("receiver did not read", _not_read(st)),
            ("drops and RTO", lossy),
            ("queue held packets", held),
            ("machine-wide stall", _together(st, every)),
        ]

    def judge(self, st: Stall, every: Sequence[Stall]) -> None:
        for cause, seen in self.evidence(st, every):
            if seen and st.cause == "unexplained":
                st.cause = cause
            st.evidence += [e for e in seen if e not in st.evidence]


def column(df: pd.DataFrame, name: str) -> list[Any]:
    return df[name].tolist() if name in df else [None] * len(df)


def _run_counter(netstat: pd.DataFrame, counter: str) -> dict[str, float]:
    """host -> end - start of one netstat.csv counter."""
    out: dict[str, float] = {}
    if netstat.empty:
        return out
    sel = netstat[netstat["counter"].astype(str) == counter]
    for host, g in sel.groupby(sel["host"].astype(str)):
        v = dict(zip(g["phase"].astype(str), numbers(g, "value")))
        if "start" in v and "end" in v:
            out[str(host)] = float(v["end"] - v["start"])
    return out


def _together(st: Stall, every: Sequence[Stall]) -> list[str]:
    """Flows sharing no host with this one that resumed with it, none of them with a sign of loss."""
    if _tcp_loss(st):
        return []
    near = [
        o for o in every if o is not st and not (o.hosts & st.hosts) and abs(o.t_resume - st.t_resume) <= SIMULTANEOUS_S
    ]
    near = [o for o in near if not _tcp_loss(o)]
    if not near:
        return []
    spread = max(abs(o.t_resume - st.t_resume) for o in near)
    return [
        f"{len(near) + 1} flows that share no host resumed within {spread * 1e3:.0f} ms of each other "
        f"({', '.join(sorted(f'{o.src}->{o.dst}' for o in near))}), none with a sign of loss"
    ]


def judge_stalls(
    tabs: StallTables, queues: Rows = (), links: Rows = (), cpu: Rows = (), th: Thresholds = Thresholds()
) -> list[Stall]:
    """Every stall of the record with its cause and evidence."""
    every = stalls_of(as_frame(tabs.stalls))
    if every:
        judge = Judge(tabs, as_frame(queues), as_frame(links), as_frame(cpu), th)
        for st in every:
            judge.judge(st, every)
    return every
