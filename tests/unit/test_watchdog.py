"""The rank workers' stall watchdog (traffic/watchdog.py) on a fake clock and fake sockets, one real loopback
zero window, and its records made into stalls.csv rows (traffic/stalls.py, traffic/ranked.py's parse)."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from testbed.telemetry.tcpinfo import OFFSETS, parse_tcp_info, read_tcp_info
from traffic.ranked import parse_ranked
from traffic.stalls import COLUMNS, flow_id, stall_rows
from traffic.watchdog import FLOOR_S, Progress, Watchdog, stall_bound

RTO_US = 204_000  # a healthy socket's RTO here: Linux's 200 ms minimum plus the path's
BOUND = 2 * RTO_US / 1e6


def tcp_bytes(**fields: int) -> bytes:
    """TCP_INFO bytes as the kernel lays them out, with ``fields`` (TcpInfo names) set and the rest 0."""
    raw = bytearray(248)
    struct.pack_into("=B", raw, 0, 1)  # established
    struct.pack_into("=I", raw, OFFSETS["rto_us"][0], RTO_US)
    for name, value in fields.items():
        off, fmt = OFFSETS[name]
        struct.pack_into("=" + fmt, raw, off, value)
    return bytes(raw)


class FakeReader:
    """Sockets are names; each has TCP_INFO fields and queue sizes the test sets."""

    def __init__(self) -> None:
        self.tcp: dict[str, dict[str, int]] = {}
        self.queued: dict[str, tuple[int, int]] = {}
        self.netstat = {"TcpExt.TCPTimeouts": 3, "Tcp.RetransSegs": 10}
        self.reads = 0

    def tcp_raw(self, sock: Any) -> bytes:
        self.reads += 1
        return tcp_bytes(**self.tcp.get(sock, {}))

    def inq(self, sock: Any) -> int:
        return self.queued.get(sock, (0, 0))[0]

    def outq(self, sock: Any) -> int:
        return self.queued.get(sock, (0, 0))[1]

    def counters(self) -> dict[str, int]:
        return dict(self.netstat)


def watchdog(sends: set[int] = frozenset(), recvs: set[int] = frozenset()) -> tuple[Watchdog, Progress, FakeReader]:
    progress, reader = Progress(), FakeReader()
    socks = {v: f"sock{v}" for v in (*sends, *recvs)}
    return Watchdog(3, socks, set(sends), set(recvs), progress, reader=reader), progress, reader


def test_the_bound_is_two_rtos_before_backoff_and_at_least_the_floor() -> None:
    assert stall_bound(parse_tcp_info(tcp_bytes())) == pytest.approx(0.408)
    # three timeouts doubled the RTO three times: the bound stays the flow's own
    backed = parse_tcp_info(tcp_bytes(rto_us=8 * RTO_US, retransmits=3, backoff=3))
    assert stall_bound(backed) == pytest.approx(0.408)
    # zero-window probes back off the probe timer, not the RTO
    assert stall_bound(parse_tcp_info(tcp_bytes(rto_us=RTO_US, probes=2, backoff=2))) == pytest.approx(0.408)
    assert stall_bound(parse_tcp_info(tcp_bytes(rto_us=10_000))) == FLOOR_S


def test_a_receive_that_keeps_coming_writes_nothing() -> None:
    wd, progress, reader = watchdog(recvs={1})
    for i in range(40):
        now = 1000.0 + 0.05 * i
        progress.recv[1] = (2, 5, 1000 * (i + 1), 10**6, now - 0.01)
        wd.tick(now)
    assert wd.drain() == [] and reader.reads == 0  # never quiet past the floor: no system call at all


def test_a_receive_with_bytes_outstanding_stalls_after_two_rtos_and_resumes() -> None:
    wd, progress, reader = watchdog(sends={2}, recvs={1})
    reader.tcp["sock2"] = {"unacked": 3, "bytes_acked": 500}  # the rank's own sending socket, moving
    progress.recv[1] = (4, 5, 9000, 222_222, 1000.0)  # 9000 bytes of step 5 came at t=1000, then nothing
    t = 1000.0
    while t < 1000.0 + BOUND - 0.01:
        t += 0.05
        reader.tcp["sock2"]["bytes_acked"] += 1000
        wd.tick(t)
    assert wd.drain() == []
    wd.tick(1000.0 + BOUND + 0.02)
    (rec,) = wd.drain()
    assert rec["type"] == "stall" and rec["side"] == "recv"
    assert (rec["iter"], rec["step"], rec["peer"], rec["rank"]) == (4, 5, 1, 3)
    assert (rec["bytes_got"], rec["bytes_needed"], rec["t_start"]) == (9000, 222_222, 1000.0)
    assert rec["bound_s"] == pytest.approx(BOUND) and rec["tcp"]["rto_us"] == RTO_US
    assert [s["peer"] for s in rec["sockets"]] == [2] and rec["sockets"][0]["send"] is True
    assert rec["counters"]["TcpExt.TCPTimeouts"] == 3
    # still stalled: nothing more; the backoff the socket shows meanwhile is kept
    reader.tcp["sock1"] = {"backoff": 2}
    reader.tcp["sock2"] = {"unacked": 0, "bytes_acked": 10**6}  # its own sends all acknowledged: idle
    wd.tick(1002.0)
    assert wd.drain() == []
    # the receiver thread saw bytes again at 1004.34 after the wait that began at 1000.0
    progress.gap[1] = (1000.0, 1004.34)
    progress.recv[1] = (4, 5, 18000, 222_222, 1004.35)
    reader.netstat["TcpExt.TCPTimeouts"] = 5
    wd.tick(1004.4)
    (end,) = wd.drain()
    assert end["type"] == "stall_end" and end["t_end"] == 1004.34
    assert end["duration_s"] == pytest.approx(4.34) and end["backoff_max"] == 2
    assert end["counters_changed"] == {"TcpExt.TCPTimeouts": 2}


def test_a_receive_nothing_of_which_came_is_the_schedules_wait_unless_bytes_sit_unread() -> None:
    wd, progress, reader = watchdog(recvs={1})
    progress.recv[1] = (0, 2, 0, 5000, 1000.0)
    wd.tick(1002.0)
    assert wd.drain() == []  # its sender has not written it yet
    reader.queued["sock1"] = (5000, 0)  # ... now it has come: the clock starts here, not at the receive's start
    wd.tick(1002.05)
    assert wd.drain() == []  # bytes that just arrived are no stall (a pipeline stage waits for its peer's compute)
    wd.tick(1002.05 + BOUND * 0.9)
    assert wd.drain() == []
    wd.tick(1002.05 + BOUND * 1.1)  # ... it sits in the socket for two RTOs and the thread does not take it
    (rec,) = wd.drain()
    assert rec["side"] == "recv" and rec["queued_bytes"] == 5000 and rec["bytes_got"] == 0
    assert rec["t_start"] == 1002.05


def test_a_finished_receive_ends_its_stall() -> None:
    wd, progress, _ = watchdog(recvs={1})
    progress.recv[1] = (0, 2, 10, 5000, 1000.0)
    wd.tick(1001.0)
    assert [r["type"] for r in wd.drain()] == ["stall"]
    progress.recv[1] = (0, -1, 0, 0, 1001.2)  # the thread finished its receives
    wd.tick(1001.25)
    (end,) = wd.drain()
    assert end["type"] == "stall_end" and end["t_end"] == 1001.2


def test_a_socket_with_unacknowledged_data_and_no_acks_stalls_and_resumes() -> None:
    wd, progress, reader = watchdog(sends={2})
    progress.sent[2] = (7, 3)
    reader.tcp["sock2"] = {"unacked": 12, "bytes_acked": 10_000, "notsent_bytes": 0}
    reader.queued["sock2"] = (0, 100_000)
    wd.tick(1000.0)  # first look: progress as far as the watchdog knows
    wd.tick(1000.2)
    wd.tick(1000.4)
    assert wd.drain() == []
    wd.tick(1000.45)
    (rec,) = wd.drain()
    assert rec["side"] == "send" and (rec["iter"], rec["step"]) == (7, 3)
    assert rec["t_start"] == 1000.0 and rec["queued_bytes"] == 100_000 and rec["bytes_got"] is None
    reader.tcp["sock2"] = {"unacked": 12, "bytes_acked": 10_000, "retransmits": 2, "backoff": 2}
    wd.tick(1001.0)
    reader.tcp["sock2"] = {"unacked": 0, "bytes_acked": 110_000}
    wd.tick(1001.5)
    (end,) = wd.drain()
    assert end["type"] == "stall_end" and end["t_end"] == 1001.5 and end["retransmits_max"] == 2
    assert end["tcp"]["bytes_acked"] == 110_000


def test_an_idle_socket_is_not_a_stall() -> None:
    wd, _, reader = watchdog(sends={2})
    reader.tcp["sock2"] = {"unacked": 0, "notsent_bytes": 0, "bytes_acked": 10}
    for i in range(50):
        wd.tick(1000.0 + 0.05 * i)
    assert wd.drain() == []


def test_totals_sum_every_sockets_retransmissions_and_timeouts() -> None:
    wd, _, reader = watchdog(sends={1}, recvs={2})
    reader.tcp["sock1"] = {"total_retrans": 5, "total_rto": 2}
    reader.tcp["sock2"] = {"total_retrans": 1}
    assert wd.totals() == (6, 2)


def test_the_thread_writes_its_summary_and_survives_a_closed_socket(tmp_path: Path) -> None:
    a, b = socket.socketpair()  # not TCP: TCP_INFO fails with OSError, which the watchdog skips
    progress = Progress()
    wd = Watchdog(0, {1: a}, {1}, set(), progress, interval=0.001)
    with open(tmp_path / "out.jsonl", "w") as out, wd.writing_to(out):
        while wd.ticks < 5:
            pass
    a.close()
    b.close()
    (summary,) = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert summary["type"] == "watch" and summary["ticks"] >= 5 and summary["error"] == ""


def test_a_real_closed_window_is_a_send_stall() -> None:
    """A loopback receiver that reads nothing: its window closes to less than a segment and bytes_acked stops; the
    kernel's own TCP_INFO and queues (a fake clock stands in for the seconds)."""
    with socket.create_server(("127.0.0.1", 0)) as srv, socket.create_connection(srv.getsockname()) as tx:
        rx, _ = srv.accept()
        with rx:
            tx.setblocking(False)
            chunk = b"x" * 65536
            deadline = time.monotonic() + 10
            while True:  # fill the socket until the receiver's window is less than a segment (SWS avoidance)
                with contextlib.suppress(BlockingIOError):
                    while True:
                        tx.send(chunk)
                ti = read_tcp_info(tx)
                if (ti.snd_wnd or 0) < ti.snd_mss and ti.notsent_bytes:
                    break
                assert time.monotonic() < deadline, ti
                time.sleep(0.01)
            progress = Progress()
            progress.sent[1] = (0, 1)
            wd = Watchdog(0, {1: tx}, {1}, set(), progress)
            wd.tick(1000.0)
            wd.tick(1001.0)
            (rec,) = wd.drain()
    assert rec["side"] == "send" and rec["queued_bytes"] > 0
    assert rec["tcp"]["snd_wnd"] < rec["tcp"]["snd_mss"] and rec["tcp"]["notsent_bytes"] > 0


# --- the records as a table ----------------------------------------------------------------------------------------
def _stall(side: str, peer: int, t0: float, **kw: Any) -> dict[str, Any]:
    tcp = {"rto_us": RTO_US, "total_retrans": 4, "rcv_ooopack": 1, "total_rto": 0, "snd_wnd": 65536}
    return {"type": "stall", "side": side, "rank": 1, "peer": peer, "iter": 4, "step": 5, "t_start": t0,
            "t_detect": t0 + 0.45, "bound_s": 0.408, "bytes_got": 9000, "bytes_needed": 222_222,
            "queued_bytes": 0, "tcp": tcp, "sockets": [], "counters": {}, **kw}  # fmt: skip


def _end(side: str, peer: int, t0: float, t1: float) -> dict[str, Any]:
    tcp = {"rto_us": RTO_US, "total_retrans": 6, "rcv_ooopack": 1, "total_rto": 2}
    return {"type": "stall_end", "side": side, "rank": 1, "peer": peer, "iter": 4, "step": 5, "t_start": t0,
            "t_end": t1, "duration_s": t1 - t0, "bytes_got": 18000, "tcp": tcp, "backoff_max": 2, "probes_max": 0,
            "retransmits_max": 2, "counters_changed": {"TcpExt.TCPTimeouts": 2, "Tcp.InSegs": 900}}  # fmt: skip


def test_flow_ids_name_the_senders_row_of_flows_csv() -> None:
    assert flow_id("ar", "send", 1, 2, 3) == "ar.r1.p2"
    assert flow_id("ar", "recv", 1, 0, 3) == "ar.r0.p1"  # rank 0 sends to rank 1 on channel 0
    assert flow_id("ar", "recv", 1, 3, 3) == "ar.r0.p4"  # ... and on channel 1 (peer ids rank + 3 x channel)


def test_stall_rows_join_detection_and_end() -> None:
    recs = {1: [_stall("recv", 0, 1000.0), _stall("send", 2, 1001.0), _end("recv", 0, 1000.0, 1004.34)]}
    rows = stall_rows("ar", ["l1h1", "l1h2", "l1h3"], recs)
    assert [tuple(r) for r in rows] == [COLUMNS, COLUMNS]
    recv, send = rows
    assert (recv["rank"], recv["peer"], recv["flow_id"], recv["side"]) == ("l1h2", "l1h1", "ar.r0.p1", "recv")
    assert recv["duration_s"] == pytest.approx(4.34) and recv["t_end"] == 1004.34
    assert (recv["retrans_during"], recv["ooo_during"], recv["rto_during"]) == (2, 0, 2)
    assert recv["counters_during"] == "TcpExt.TCPTimeouts=2"  # counters outside the list stay in raw/ only
    assert recv["rto_us"] == RTO_US and recv["backoff_max"] == 2
    # a stall that never ended: no end, no duration, no deltas
    assert send["flow_id"] == "ar.r1.p2" and send["t_end"] is None and send["duration_s"] is None
    assert send["retrans_during"] is None and send["counters_during"] == ""


def _raw_job(tmp_path: Path, with_watch: bool) -> Path:
    tmp_path.mkdir()
    hosts = [{"name": f"h{i}", "ip": f"10.0.0.{i}", "leaf": "l1"} for i in range(2)]
    cfg = {"job": "ar", "kind": "allreduce", "algorithm": "ring", "hosts": hosts, "leaves": ["l1", "l1"],
           "size": 1000, "wire_size": 1000, "payload_Bps": 1e6, "iterations": 1, "warmup": 0}  # fmt: skip
    (tmp_path / "ar.config.json").write_text(json.dumps(cfg))
    for r in range(2):
        lost = {"retrans": 3 * r, "timeouts": r} if with_watch else {}  # older workers wrote neither
        recs: list[dict[str, Any]] = [
            {"type": "iter", "iter": 0, "warmup": False, "rank": r, "t_start": 1.0, "t_end": 2.0, "size": 1000, **lost}
        ]
        if with_watch:
            recs.append({"type": "watch", "rank": r, "ticks": 20, "cpu_s": 0.001})
            if r == 1:
                recs += [_stall("recv", 0, 1.2), _end("recv", 0, 1.2, 1.9)]
        (tmp_path / f"ar.rank{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    return tmp_path


def test_parse_gives_stalls_only_where_the_workers_watched(tmp_path: Path) -> None:
    old = parse_ranked(_raw_job(tmp_path / "old", False), "ar")
    assert "stalls" not in old  # raw files from before the watchdog: no table, not an empty one
    assert (old["iterations"][0]["retrans"], old["iterations"][0]["timeouts"]) == (None, None)
    new = parse_ranked(_raw_job(tmp_path / "new", True), "ar")
    assert (new["iterations"][0]["retrans"], new["iterations"][0]["timeouts"]) == (3, 1)  # summed over ranks
    (row,) = new["stalls"]
    assert (row["rank"], row["peer"], row["flow_id"], row["duration_s"]) == ("h1", "h0", "ar.r0.p1", 0.7)


def test_the_machines_major_faults_are_read_from_vmstat() -> None:
    from traffic.watchdog import vm_faults

    assert vm_faults("pgfault 100\npgmajfault 7\npgrefill 0\n") == {"Vm.pgmajfault": 7}
    assert vm_faults("pgfault 100\n") == {}
