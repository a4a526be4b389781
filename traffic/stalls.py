"""stalls.csv rows from the rank workers' watchdog records (``traffic.watchdog``): pure, one row per stall.

A ``stall`` record (at detection) and its ``stall_end`` (when progress resumed) make one row: the stalled socket's
TCP_INFO at detection, what changed by the end (retransmissions, out-of-order packets, timeouts, the namespace's
TCP counters named in ``STALL_COUNTERS``), and the largest backoff, probe and timeout counts seen while it lasted.
A stall that never ended (the job timed out) has empty ``t_end`` and ``duration_s``. Ranks are host names;
``flow_id`` is the sending rank's row of flows.csv (``<job>.r<rank>.p<peer id>``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from testbed.spec.schemas import SCHEMAS, STALL_TCP_COLUMNS

COLUMNS = SCHEMAS["stalls"][0]
TCP_COLUMNS = STALL_TCP_COLUMNS  # TCP_INFO fields copied from the record at detection
# the namespace's counters worth a column when they moved during a stall (all moved counters stay in raw/)
STALL_COUNTERS = (
    "Proc.majflt",
    "Vm.pgmajfault",
    "Tcp.RetransSegs",
    "TcpExt.TCPTimeouts",
    "TcpExt.TCPLossProbes",
    "TcpExt.TCPSpuriousRtxHostQueues",
    "TcpExt.TCPSpuriousRTOs",
    "TcpExt.TCPLostRetransmit",
    "TcpExt.TCPRetransFail",
    "TcpExt.TCPOFOQueue",
    "TcpExt.TCPOFODrop",
    "TcpExt.TCPRcvQDrop",
    "TcpExt.TCPBacklogDrop",
    "TcpExt.TCPZeroWindowDrop",
    "TcpExt.TCPWantZeroWindowAdv",
    "TcpExt.TCPToZeroWindowAdv",
    "TcpExt.TCPFromZeroWindowAdv",
    "TcpExt.PruneCalled",
    "TcpExt.RcvPruned",
    "TcpExt.TCPMemoryPressures",
    "TcpExt.TCPDSACKRecv",
    "Ip.InDiscards",
    "Ip.OutDiscards",
    "IpExt.InNoRoutes",
)


def flow_id(job: str, side: str, rank: int, peer: int, n: int) -> str:
    """The flows.csv id of the stalled direction: a send stall is this rank's flow to ``peer`` (a peer id,
    ``rank + n x channel``); a receive stall is the peer's flow to this rank on the same channel."""
    if side == "send":
        return f"{job}.r{rank}.p{peer}"
    return f"{job}.r{peer % n}.p{rank + n * (peer // n)}"


def _delta(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, key: str) -> int | None:
    if not a or not b or a.get(key) is None or b.get(key) is None:
        return None
    return int(b[key]) - int(a[key])


def stall_rows(job: str, names: Sequence[str], records: Mapping[int, Sequence[Mapping[str, Any]]]) -> list[dict]:
    """``records``: rank -> that rank's ``stall``/``stall_end`` records in the order written."""
    n = len(names)
    rows: list[dict[str, Any]] = []
    for rank, recs in sorted(records.items()):
        ends = {(e["side"], e["peer"], e["t_start"]): e for e in recs if e.get("type") == "stall_end"}
        for s in recs:
            if s.get("type") != "stall":
                continue
            e = ends.get((s["side"], s["peer"], s["t_start"]))
            tcp, tcp_end = s.get("tcp") or {}, (e or {}).get("tcp")
            changed = (e or {}).get("counters_changed") or {}
            row: dict[str, Any] = {
                "job": job,
                "side": s["side"],
                "rank": names[rank],
                "peer": names[s["peer"] % n],
                "flow_id": flow_id(job, s["side"], rank, s["peer"], n),
                "iter": s["iter"],
                "step": s["step"],
                "t_start": s["t_start"],
                "t_detect": s["t_detect"],
                "t_end": e["t_end"] if e else None,
                "duration_s": e["duration_s"] if e else None,
                "bound_s": s["bound_s"],
                "bytes_got": s.get("bytes_got"),
                "bytes_needed": s.get("bytes_needed"),
                "queued_bytes": s.get("queued_bytes"),
                **{c: tcp.get(c) for c in TCP_COLUMNS},
                "retrans_during": _delta(tcp, tcp_end, "total_retrans"),
                "ooo_during": _delta(tcp, tcp_end, "rcv_ooopack"),
                "rto_during": _delta(tcp, tcp_end, "total_rto"),
                "backoff_max": (e or {}).get("backoff_max"),
                "probes_max": (e or {}).get("probes_max"),
                "retransmits_max": (e or {}).get("retransmits_max"),
                "counters_during": " ".join(f"{k}={changed[k]}" for k in STALL_COUNTERS if changed.get(k)),
            }
            rows.append({c: row.get(c) for c in COLUMNS})
    return rows
