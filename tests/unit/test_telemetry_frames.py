"""The sampler's frame readers and loop, on dumps captured from the default fabric's spine s1 (4 shaped ports).

tests/data/telemetry/spine_qdisc_dump.bin: RTM_GETQDISC dump of namespace s1 (lo noqueue; s1-l1..s1-l4, ifindex
2-5, each htb 1: + bfifo 10:) while 8 iperf3 flows ran; spine_stats_dump.bin / spine_link_dump.bin: its RTM_GETSTATS
and RTM_GETLINK dumps of the same moment. The loop test feeds the ``Sampler`` scripted dumps and clock readings and
checks its queues.csv and links.csv against the row policy written out plainly (the full parsers, every dump read).
"""

from __future__ import annotations

import csv
import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.telemetry import rtnl, sampler
from testbed.telemetry.fastpath import LinkFrame, QueueFrame, _offsets, queue_values
from testbed.telemetry.ports import PortRef, SamplerConfig

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry"
HTB, BFIFO = 0x10000, 0x100000
PORTS = [((i, BFIFO), (i, HTB)) for i in (2, 3, 4, 5)]
NAMES = {1: "lo", 2: "s1-l1", 3: "s1-l2", 4: "s1-l3", 5: "s1-l4"}


def _dump(name: str) -> bytes:
    return (DATA / name).read_bytes()


def _counters(s: rtnl.QdiscStats | None) -> tuple[Any, ...] | None:
    if s is None:
        return None
    return (s.bytes, s.packets, s.qlen, s.backlog, s.drops, s.requeues, s.overlimits, s.marks)


def _expected(buf: bytes, ports: list[tuple[tuple[int, int], tuple[int, int] | None]]) -> list[Any]:
    full = rtnl.parse_qdisc_dump(buf)
    return [
        queue_values(_counters(full.get(leaf)), _counters(full.get(root)) if root else None) for leaf, root in ports
    ]


def _messages(buf: bytes) -> Iterator[tuple[int, int, tuple[int, int]]]:
    """(start, end, (ifindex, handle)) of every message."""
    for _t, body, end in rtnl.iter_messages(buf):
        yield body - 16, end, struct.unpack_from("=4xiI", buf, body)


def _patch_queue(buf: bytes, key: tuple[int, int], **fields: int) -> bytes:
    """``buf`` with one qdisc's gnet_stats_queue/basic fields set (qlen, backlog, drops, requeues, overlimits, bytes)."""
    out = bytearray(buf)
    for start, end, k in _messages(buf):
        if k == key:
            b, q, _p64, _red = _offsets(buf, start + 16, end)
            names = ("qlen", "backlog", "drops", "requeues", "overlimits")
            for name, value in fields.items():
                if name == "bytes":
                    struct.pack_into("=Q", out, b + 4, value)
                else:
                    struct.pack_into("=I", out, q + 4 + 4 * names.index(name), value)
    return bytes(out)


def _without(buf: bytes, key: tuple[int, int]) -> bytes:
    return b"".join(buf[s:e] for s, e, k in _messages(buf) if k != key)


def test_queue_frame_matches_the_full_parse_and_reads_fast() -> None:
    buf = _dump("spine_qdisc_dump.bin")
    f = QueueFrame(PORTS)
    assert f.read(buf) == _expected(buf, PORTS) and (f.slow, f.fast) == (1, 0)
    busy = _patch_queue(buf, (3, BFIFO), backlog=123456, qlen=14, drops=7)
    busy = _patch_queue(busy, (3, HTB), overlimits=99, bytes=2**40 + 5, requeues=3)
    got = f.read(busy)
    assert got == _expected(busy, PORTS) and (f.slow, f.fast) == (1, 1)
    assert got[1] == (123456, 14, 7, "", 99, 2**40 + 5, got[1][6], 3)


def test_queue_frame_learns_again_when_the_dump_changes_shape() -> None:
    buf = _dump("spine_qdisc_dump.bin")
    f = QueueFrame(PORTS)
    f.read(buf)
    # another handle in the same place (same length): the key check fails -> full parse
    moved = bytearray(buf)
    pos = moved.find(struct.pack("=iI", 4, BFIFO))
    moved[pos + 4 : pos + 8] = struct.pack("=I", 0x200000)
    got = f.read(bytes(moved))
    assert f.slow == 2 and got[2] is None and got[:2] == _expected(buf, PORTS)[:2]
    # a leaf gone (shorter dump) -> None for that port; its root alone stands for a port whose leaf is the root
    gone = _without(buf, (5, BFIFO))
    assert f.read(gone) == _expected(gone, PORTS) and f.read(gone)[3] is None and f.fast == 1
    roots = QueueFrame([((2, HTB), None), ((2, BFIFO), (2, 0x30000))])  # a root handle that does not exist
    assert roots.read(buf) == roots.read(buf) == _expected(buf, roots.ports) and roots.fast == 1
    assert f.read(buf) == _expected(buf, PORTS)


def _rta(atype: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _qdisc_message(handle: int, kind: bytes, marked: int | None, pkts64: int | None) -> bytes:
    stats2 = _rta(rtnl.TCA_STATS_BASIC, struct.pack("=QI4x", 1000 + handle, 10))
    if pkts64 is not None:
        stats2 += _rta(rtnl.TCA_STATS_PKT64, struct.pack("=Q", pkts64))
    stats2 += _rta(rtnl.TCA_STATS_QUEUE, struct.pack("=IIIII", 2, 3000, 4, 1, 5))
    if marked is not None:
        stats2 += _rta(rtnl.TCA_STATS_APP, struct.pack("=IIII", 1, 2, 3, marked))
    body = struct.pack("=BxxxiIII", socket.AF_UNSPEC, 7, handle, 0xFFFFFFFF, 1)
    body += _rta(rtnl.TCA_KIND, kind + b"\0") + _rta(rtnl.TCA_STATS2, stats2)
    return struct.pack("=IHHII", 16 + len(body), rtnl.RTM_NEWQDISC, 2, 1, 0) + body


def test_queue_frame_red_marks_and_64_bit_packet_counts() -> None:
    ports = [((7, BFIFO), (7, HTB))]
    f = QueueFrame(ports)
    for marked in (42, 43):
        buf = _qdisc_message(HTB, b"htb", None, 2**33 + marked) + _qdisc_message(BFIFO, b"red", marked, None)
        assert f.read(buf) == _expected(buf, ports)
        assert f.read(buf)[0] == (3000, 2, 4, marked, 5, 1000 + HTB, 2**33 + marked, 1)
    assert (f.slow, f.fast) == (1, 3)


def test_link_frame_matches_the_full_parse() -> None:
    buf = _dump("spine_stats_dump.bin")
    want = {2, 3, 5}
    f = LinkFrame(want)
    full = rtnl.parse_stats_dump(buf)
    expect = [
        (i, (s.tx_bytes, s.tx_packets, s.rx_bytes, s.rx_packets, s.tx_dropped)) for i, s in full.items() if i in want
    ]
    assert f.read(buf) == f.read(buf) == expect and (f.slow, f.fast) == (1, 1)
    assert [i for i, _v in expect] == [2, 3, 5]
    moved = bytearray(buf)
    pos = moved.find(struct.pack("=BxxxII", 0, 3, 1))
    moved[pos + 4 : pos + 8] = struct.pack("=I", 9)
    assert [i for i, _v in f.read(bytes(moved))] == [2, 5] and f.slow == 2


class FakeSocket:
    """Each ``send`` queues the next scripted reply (a list of datagrams) for ``recv_into``; records what was sent."""

    def __init__(self, replies: list[list[bytes]]):
        self.replies, self.queue, self.sent = list(replies), [], []

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        self.queue += self.replies.pop(0)
        return len(data)

    def recv_into(self, buf: bytearray, nbytes: int = 0, flags: int = 0) -> int:
        if not self.queue and flags & socket.MSG_DONTWAIT:
            raise BlockingIOError
        d = self.queue.pop(0)
        n = min(len(d), nbytes or len(buf))
        buf[:n] = d[:n]
        return len(d) if flags & socket.MSG_TRUNC else n

    def setsockopt(self, *args: Any) -> None:
        pass

    def bind(self, addr: Any) -> None:
        pass


def _done(seq: int) -> bytes:
    return struct.pack("=IHHIIi", 20, rtnl.NLMSG_DONE, 2, seq, 0, 0)


def test_dumper_takes_every_reply_shape() -> None:
    data = _dump("spine_qdisc_dump.bin")
    seq = rtnl.FIXED_SEQ | rtnl.RTM_GETQDISC
    half = next(s for s, _e, _k in _messages(data) if s > 700)
    replies = [[data, _done(seq)], [data + _done(seq)], [data[:half], data[half:], _done(seq)], [_done(seq)]]
    fake = FakeSocket(replies)
    dump = rtnl.RtnlSocket(fake).dumper(rtnl.RTM_GETQDISC)  # type: ignore[arg-type]
    assert dump() == data and dump() == data and dump() == data and dump() == b""
    assert not fake.queue and fake.sent == [rtnl.dump_request(rtnl.RTM_GETQDISC, seq)] * 4
    # a datagram larger than the receive size: the rest of that dump is dropped, and it is done again in full
    for first in ([data, _done(seq)], [data + _done(seq)]):
        fake = FakeSocket([first, [data, _done(seq)], [data + _done(seq)]])
        dump = rtnl.RtnlSocket(fake).dumper(rtnl.RTM_GETQDISC, recv_size=1024)  # type: ignore[arg-type]
        assert dump() == data and len(fake.sent) == 2 and dump() == data and not fake.queue
    err = struct.pack("=IHHIIi", 20 + len(fake.sent[0]), rtnl.NLMSG_ERROR, 0, seq, 0, -1) + fake.sent[0]
    with pytest.raises(rtnl.NetlinkError):
        rtnl.iter_messages(rtnl.RtnlSocket(FakeSocket([[err]])).dumper(rtnl.RTM_GETQDISC)())  # type: ignore[arg-type]


class ScriptedSocket:
    """An RtnlSocket stand-in: each dumper returns the next scripted dump."""

    def __init__(self, qdisc: list[bytes], stats: list[bytes]):
        self.scripts = {rtnl.RTM_GETQDISC: qdisc, rtnl.RTM_GETSTATS: stats}

    def dumper(self, msg_type: int) -> Callable[[], bytes]:
        return lambda: self.scripts[msg_type].pop(0)

    def close(self) -> None:
        pass


def _reference(
    steps: list[tuple[float, bytes]], ports: list[PortRef], keys: list[Any], kf: float, final: bool
) -> list[str]:
    """queues.csv rows by the row policy, plainly: full parse of every dump, compare with each queue's last row."""
    rows, last, last_t = [], [None] * len(ports), [0.0] * len(ports)
    for n, (t, buf) in enumerate(steps):
        for i, v in enumerate(_expected(buf, keys)):
            if v is None:
                continue
            if (final and n == len(steps) - 1) or v != last[i] or t - last_t[i] >= kf:
                rows.append(",".join([f"{t:.6f}", ports[i].node, ports[i].dev, *map(str, v)]))
                last[i], last_t[i] = v, t
    return rows


def test_sampler_rows_follow_the_row_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = _dump("spine_qdisc_dump.bin")
    refs = [PortRef("tb1-s1", NAMES[i], node="s1") for i in (2, 3, 4, 5)]
    t0 = 1764624000.0
    dumps = []
    for n in range(200):  # 2 ms apart: quiet, then s1-l2 busy, then quiet again, then a leaf gone and back
        buf = base
        if 40 <= n < 90:
            buf = _patch_queue(buf, (3, BFIFO), backlog=1000 * (n // 3), qlen=n // 3)
            buf = _patch_queue(buf, (3, HTB), bytes=10**9 + 9000 * (n // 2))
        if 120 <= n < 125:
            buf = _patch_queue(base, (2, HTB), qlen=5)  # a byte changed that is in no row: no row
        if 150 <= n < 160:
            buf = _without(base, (5, BFIFO))
        dumps.append((t0 + 0.002 * n + (0.0000004 if n % 7 else 0.0), buf))
    final = (t0 + 0.5, base)
    clock = iter([t for t, _b in dumps] + [final[0]])
    monkeypatch.setattr(sampler.time, "time", lambda: next(clock))
    sock = ScriptedSocket([b for _t, b in dumps] + [final[1]], [])
    pl = sampler.NsPoller("tb1-s1", sock, [], dict(NAMES), "s1")  # type: ignore[arg-type]
    pl.set_ports([sampler._Port(r, (i, BFIFO), (i, HTB)) for r, i in zip(refs, (2, 3, 4, 5), strict=True)])
    cfg = SamplerConfig(ports=refs, cpu_hz=0)
    s = sampler.Sampler(cfg, tmp_path, pollers=[pl])
    for _ in dumps:
        s._queues()
    s._queues(final=True)
    s.close()
    got = (tmp_path / "queues.csv").read_text().splitlines()
    assert got[0] == ",".join(sampler.QUEUES_HEADER)
    assert got[1:] == _reference([*dumps, final], refs, PORTS, cfg.keyframe_s, final=True)
    assert s.queues.rows == len(got) - 1
    assert pl.ports[3].missing == 10 and len(s.errors) == 1 and "vanished on tb1-s1/s1-l4" in s.errors[0]
    assert pl.frame.slow <= 4  # the base layout, the short one, and back
    with open(tmp_path / "queues.csv") as fh:
        assert all(r["marks"] == "" for r in csv.DictReader(fh))


def test_sampler_link_rows_follow_the_row_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stats = _dump("spine_stats_dump.bin")
    full = rtnl.parse_stats_dump(stats)
    t0 = 1764624000.0
    steps = []
    for n in range(60):  # 10 ms apart; s1-l3 sends during 20..30
        buf = bytearray(stats)
        if 20 <= n < 30:
            pos = bytes(buf).find(struct.pack("=BxxxII", 0, 4, 1)) + 16  # IFLA_STATS_LINK_64 payload
            struct.pack_into("=Q", buf, pos + 24, full[4].tx_bytes + 9000 * n)
        steps.append((t0 + 0.01 * n, bytes(buf)))
    clock = iter([t for t, _b in steps])
    monkeypatch.setattr(sampler.time, "time", lambda: next(clock))
    assert rtnl.parse_link_names(_dump("spine_link_dump.bin")) == NAMES
    ref = PortRef("tb1-s1", "s1-l1", node="s1")
    pl = sampler.NsPoller("tb1-s1", ScriptedSocket([], [b for _t, b in steps]), [], dict(NAMES), "s1")  # type: ignore[arg-type]
    s = sampler.Sampler(SamplerConfig(ports=[ref], cpu_hz=0), tmp_path, pollers=[pl])
    for _ in steps[:-1]:
        s._links()
    s._links(final=True)
    s.close()
    rows, last = [], {}
    for n, (t, buf) in enumerate(steps):
        for idx, st in rtnl.parse_stats_dump(buf).items():
            if NAMES[idx] == "lo":
                continue
            v = (st.tx_bytes, st.tx_packets, st.rx_bytes, st.rx_packets, st.tx_dropped)
            prev = last.get(idx)
            if n == len(steps) - 1 or prev is None or prev[0] != v or t - prev[1] >= 0.1:
                rows.append(f"{t:.6f},s1,{NAMES[idx]}," + ",".join(map(str, v)))
                last[idx] = (v, t)
    got = (tmp_path / "links.csv").read_text().splitlines()
    assert got[1:] == rows and s.links.rows == len(rows)
    assert pl.links.slow == 1


def test_row_format_escapes_percent() -> None:
    fmt = sampler.row_format("n%1", "d%s", 2)
    assert fmt % ("1.000000", 3, "") == "1.000000,n%1,d%s,3,\n"
