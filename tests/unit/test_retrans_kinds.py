"""Retransmissions by kind from the netstat counters' deltas (results.metrics.tcp), and n/a naming the counter an
older record lacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from results.metrics import summarize
from results.record import RunRecord, load_run

# (counter, start, end) per host; the deltas: h1 RetransSegs 30, h2 54
H1 = [
    ("Tcp.RetransSegs", 100, 130),
    ("TcpExt.TCPFastRetrans", 40, 52),
    ("TcpExt.TCPTimeouts", 2, 4),
    ("TcpExt.TCPSlowStartRetrans", 0, 6),
    ("TcpExt.TCPLossProbes", 10, 13),
    ("TcpExt.TCPRetransFail", 0, 7),
    ("TcpExt.TCPDSACKRecvSegs", 5, 6),
    ("TcpExt.TCPDSACKRecv", 5, 6),
]
H2 = [
    ("Tcp.RetransSegs", 0, 54),
    ("TcpExt.TCPFastRetrans", 0, 0),
    ("TcpExt.TCPTimeouts", 0, 0),
    ("TcpExt.TCPSlowStartRetrans", 0, 0),
    ("TcpExt.TCPLossProbes", 0, 54),  # every retransmission a tail-loss probe
    ("TcpExt.TCPRetransFail", 0, 0),
    ("TcpExt.TCPDSACKRecvSegs", 0, 47),  # most of them spurious
    ("TcpExt.TCPDSACKRecv", 0, 47),
]


def _rows(host: str, counters: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    return [
        {"host": host, "phase": phase, "counter": c, "value": v}
        for c, a, b in counters
        for phase, v in (("start", a), ("end", b))
    ]


def _summary(tmp_path: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    rec = RunRecord.create(tmp_path, "m")
    rec.table("netstat").write_many(rows)
    rec.finish()
    return summarize(load_run(rec.path))


def test_kinds_from_known_deltas(tmp_path: Path) -> None:
    s = _summary(tmp_path, _rows("h1", H1) + _rows("h2", H2))
    assert s["retrans_total"] == 84
    assert s["retrans_fast_total"] == 12
    assert s["retrans_rto_total"] == 2 + 6  # two expiries, each resending one segment, then 6 in the Loss state
    assert s["retrans_tlp_total"] == 57
    assert s["retrans_failed_total"] == 7
    assert s["retrans_spurious_total"] == 48
    assert s["dsack_total"] == 48


def test_a_counter_the_record_lacks_is_not_applicable_by_name(tmp_path: Path) -> None:
    """A record from a kernel without TCPDSACKRecvSegs, and a host without TCPSlowStartRetrans on both phases."""
    h1 = [c for c in H1 if c[0] != "TcpExt.TCPDSACKRecvSegs"]
    rows = [r for r in _rows("h1", h1) if not (r["counter"] == "TcpExt.TCPSlowStartRetrans" and r["phase"] == "end")]
    s = _summary(tmp_path, rows)
    assert s["retrans_fast_total"] == 12
    assert s["retrans_spurious_total"] is None
    why = s["not_applicable"]["retrans_spurious_total"]
    assert "TcpExt.TCPDSACKRecvSegs" in why and why.startswith("D-SACKed segments")
    assert s["retrans_rto_total"] is None  # the RTO figure needs both of its counters
    assert "TcpExt.TCPSlowStartRetrans" in s["not_applicable"]["retrans_rto_total"]
    assert "TcpExt.TCPTimeouts" not in s["not_applicable"]["retrans_rto_total"]


def test_no_netstat_at_all(tmp_path: Path) -> None:
    s = _summary(tmp_path, [])
    for key in ("retrans_fast_total", "retrans_rto_total", "retrans_tlp_total", "retrans_spurious_total"):
        assert s[key] is None and s["not_applicable"][key].startswith("no TCP counters"), key
