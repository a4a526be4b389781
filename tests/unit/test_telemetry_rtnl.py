"""rtnetlink parsers of the telemetry sampler, on a qdisc/link dump captured once from a real shaped port.

tests/data/telemetry/qdisc_dump_htb_bfifo.bin: RTM_GETQDISC dump of namespace tbd4-rtr (lo, r0, r1 with htb 1: +
bfifo 10: limit 300000) while two iperf3 flows filled r1; qdisc_dump_htb_bfifo.tc.txt is `tc -s qdisc show`
taken a few ms after it. link_dump.bin / stats_dump.bin: RTM_GETLINK and RTM_GETSTATS dumps of the same moment.
"""

from __future__ import annotations

import re
import socket
import struct
from pathlib import Path

import pytest

from testbed.telemetry import rtnl
from testbed.telemetry.fastpath import QdiscReader
from testbed.telemetry.gaps import GapStats
from testbed.telemetry.sampler import queue_values

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry"
HTB, BFIFO = (3, 0x10000), (3, 0x100000)  # ifindex 3 (r1): handles 1: and 10:


def _dump(name: str) -> bytes:
    return (DATA / name).read_bytes()


def test_handles() -> None:
    assert rtnl.parse_handle("10:") == 0x100000 == BFIFO[1]
    assert rtnl.parse_handle("1:1") == 0x10001
    assert rtnl.format_handle(0x100000) == "10:" and rtnl.format_handle(0x10001) == "1:1"
    with pytest.raises(ValueError):
        rtnl.parse_handle("10")


def test_qdisc_dump_parses_htb_and_bfifo() -> None:
    q = rtnl.parse_qdisc_dump(_dump("qdisc_dump_htb_bfifo.bin"))
    assert sorted(q) == [(1, 0), (2, 0), HTB, BFIFO]
    htb, fifo = q[HTB], q[BFIFO]
    assert (htb.kind, htb.parent) == ("htb", 0xFFFFFFFF)
    assert (fifo.kind, fifo.parent) == ("bfifo", 0x10001)
    assert (fifo.bytes, fifo.packets, fifo.qlen, fifo.backlog, fifo.drops) == (24896221, 16461, 163, 246782, 12)
    assert (htb.overlimits, fifo.overlimits, htb.drops, fifo.marks) == (16386, 0, 12, None)
    assert q[(1, 0)].kind == "noqueue"


def test_qdisc_dump_agrees_with_tc_text_taken_just_after() -> None:
    fifo = rtnl.parse_qdisc_dump(_dump("qdisc_dump_htb_bfifo.bin"))[BFIFO]
    text = (DATA / "qdisc_dump_htb_bfifo.tc.txt").read_text()
    m = re.search(r"qdisc bfifo 10: dev r1 .*?\n Sent (\d+) bytes (\d+) pkt \(dropped (\d+).*?\n backlog (\d+)b", text)
    assert m is not None
    sent, pkts, dropped, backlog = map(int, m.groups())
    assert fifo.drops == dropped  # no drop in the few ms between the two reads
    assert fifo.bytes <= sent and fifo.packets <= pkts and sent - fifo.bytes < 100_000
    assert abs(fifo.backlog - backlog) < 10_000 and fifo.backlog <= 300000


def test_wanted_filter_and_truncation() -> None:
    buf = _dump("qdisc_dump_htb_bfifo.bin")
    assert sorted(rtnl.parse_qdisc_dump(buf, {BFIFO})) == [BFIFO]
    with pytest.raises(rtnl.NetlinkError):
        rtnl.parse_qdisc_dump(buf[: len(buf) - 30])


def test_error_reply_raises_with_errno() -> None:
    req = rtnl.dump_request(rtnl.RTM_GETQDISC, 7)
    err = struct.pack("=IHHII", 16 + 4 + len(req), rtnl.NLMSG_ERROR, 0, 7, 0) + struct.pack("=i", -22) + req
    with pytest.raises(rtnl.NetlinkError) as exc:
        rtnl.iter_messages(err)
    assert exc.value.errno == 22


def _rta(atype: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _red_message(marked: int) -> bytes:
    stats2 = (
        _rta(rtnl.TCA_STATS_BASIC, struct.pack("=QI4x", 1000, 10))
        + _rta(rtnl.TCA_STATS_QUEUE, struct.pack("=IIIII", 2, 3000, 4, 0, 5))
        + _rta(rtnl.TCA_STATS_APP, struct.pack("=IIII", 1, 2, 3, marked))
    )
    body = struct.pack("=BxxxiIII", socket.AF_UNSPEC, 5, 0x100000, 0x10001, 1)
    body += _rta(rtnl.TCA_KIND, b"red\0") + _rta(rtnl.TCA_STATS2, stats2)
    return struct.pack("=IHHII", 16 + len(body), rtnl.RTM_NEWQDISC, 2, 1, 0) + body


def test_red_marks_from_xstats_both_parsers() -> None:
    buf = _red_message(42)
    q = rtnl.parse_qdisc_dump(buf)[(5, 0x100000)]
    assert (q.kind, q.marks, q.backlog, q.drops, q.overlimits) == ("red", 42, 3000, 4, 5)
    r = QdiscReader({(5, 0x100000)})
    assert r.read(buf)[(5, 0x100000)][7] == 42
    assert r.read(_red_message(43))[(5, 0x100000)][7] == 43 and r.fast == 1


def test_fast_reader_matches_full_parser_and_falls_back() -> None:
    buf = _dump("qdisc_dump_htb_bfifo.bin")
    full = rtnl.parse_qdisc_dump(buf, {HTB, BFIFO})
    r = QdiscReader({HTB, BFIFO})
    first, second = r.read(buf), r.read(buf)
    assert (r.slow, r.fast) == (1, 1) and first == second
    for key, s in full.items():
        assert first[key] == (s.bytes, s.packets, s.qlen, s.backlog, s.drops, s.requeues, s.overlimits, s.marks)
    # the bfifo replaced by another handle (same length): the cached layout no longer fits -> full parse
    changed = bytearray(buf)
    pos = changed.find(struct.pack("=iI", 3, 0x100000))
    changed[pos + 4 : pos + 8] = struct.pack("=I", 0x200000)
    out = r.read(bytes(changed))
    assert r.slow == 2 and sorted(out) == [HTB]


def test_links_names_and_stats64() -> None:
    assert rtnl.parse_link_names(_dump("link_dump.bin")) == {1: "lo", 2: "r0", 3: "r1"}
    st = rtnl.parse_stats_dump(_dump("stats_dump.bin"))
    r1 = st[3]
    assert (r1.tx_packets, r1.tx_bytes, r1.rx_packets, r1.tx_dropped) == (16469, 24906909, 9366, 0)
    fifo = rtnl.parse_qdisc_dump(_dump("qdisc_dump_htb_bfifo.bin"))[BFIFO]
    assert r1.tx_bytes >= fifo.bytes  # the device has sent at least what the qdisc had dequeued before


def test_queue_values_leaf_and_root() -> None:
    leaf = (100, 1, 2, 3000, 7, 0, 0, None)
    root = (900, 9, 2, 3000, 7, 1, 55, None)
    assert queue_values(leaf, root) == (3000, 2, 7, "", 55, 900, 9, 1)
    assert queue_values(leaf, None) == (3000, 2, 7, "", 0, 100, 1, 0)
    assert queue_values(None, root) is None


def test_gap_stats_rate_and_jitter() -> None:
    g = GapStats()
    for i in range(1001):
        g.add(i * 0.001 + (0.0002 if i % 2 else 0.0))
    s = g.summary()
    assert s["samples"] == 1001 and s["rate_hz"] == pytest.approx(1000, rel=1e-3)
    assert s["jitter"] == pytest.approx(0.2, rel=0.01)  # gaps alternate 1.2 / 0.8 ms
    assert s["gap_p50_ms"] in (0.85, 1.25) and s["gap_max_ms"] == pytest.approx(1.2)
