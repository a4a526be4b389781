"""senders.csv and the sender_backlog guardrail, without root: sock_diag replies, the poller, the check."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from results.fidelity import Thresholds, evaluate
from results.fidelity.senders import check_senders
from testbed.spec.schemas import SCHEMAS
from testbed.spec.workload import IperfJob, RttProbeJob
from testbed.telemetry.ports import ConfigError, PortRef, SamplerConfig, SenderRef
from testbed.telemetry.senders import SENDERS_HEADER, SenderPoller
from testbed.telemetry.sockdiag import INET_DIAG_INFO, SOCK_DIAG_BY_FAMILY, SockId, parse_diag
from testbed.telemetry.tcpinfo import parse_tcp_info
from traffic.iperf import bulk_senders


def _tcp_info(app_limited: bool, notsent: int, acked: int, busy: int = 0, rwnd: int = 0, sndbuf: int = 0) -> bytes:
    raw = bytearray(232)
    raw[0] = 1  # ESTABLISHED
    raw[7] = 1 if app_limited else 0
    struct.pack_into("=I", raw, 24, 7)  # unacked
    struct.pack_into("=I", raw, 80, 10)  # cwnd
    struct.pack_into("=Q", raw, 120, acked)
    struct.pack_into("=I", raw, 144, notsent)
    struct.pack_into("=QQQ", raw, 168, busy, rwnd, sndbuf)
    return bytes(raw)


def _diag_msg(sport: int, dport: int, info: bytes, family: int = socket.AF_INET) -> bytes:
    sockid = struct.pack(">HH16s16s", sport, dport, bytes(16), bytes(16)) + struct.pack("=III", 0, 1, 2)
    body = struct.pack("=BBBB", family, 1, 0, 0) + sockid + struct.pack("=IIIII", 0, 0, 0, 0, 0)
    attr = struct.pack("=HH", 4 + len(info), INET_DIAG_INFO) + info
    attr += bytes((-len(attr)) % 4)
    msg = body + attr
    return struct.pack("=IHHII", 16 + len(msg), SOCK_DIAG_BY_FAMILY, 2, 1, 0) + msg


DONE = struct.pack("=IHHII", 20, 3, 2, 1, 0) + struct.pack("=i", 0)


def test_tcp_info_reads_the_sender_fields() -> None:
    ti = parse_tcp_info(_tcp_info(True, 0, 12345, busy=900, rwnd=40, sndbuf=5))
    assert ti.app_limited and ti.notsent_bytes == 0 and ti.bytes_acked == 12345 and ti.unacked == 7
    assert (ti.busy_time_us, ti.rwnd_limited_us, ti.sndbuf_limited_us) == (900, 40, 5)
    assert not parse_tcp_info(_tcp_info(False, 9000, 1)).app_limited
    short = parse_tcp_info(_tcp_info(False, 0, 1)[:104])  # an old kernel's shorter struct
    assert short.notsent_bytes is None and short.busy_time_us is None


def test_parse_diag_reads_every_socket_and_the_end() -> None:
    buf = _diag_msg(40000, 5201, _tcp_info(False, 5000, 10)) + _diag_msg(40001, 5201, _tcp_info(True, 0, 20)) + DONE
    got, ended, err = parse_diag(buf)
    assert ended and err == 0
    assert [(s.sport, s.dport, i.bytes_acked) for s, i in got] == [(40000, 5201, 10), (40001, 5201, 20)]
    assert len(got[0][0].raw) == 48 and got[0][0].family == socket.AF_INET
    error = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -2) + bytes(16)
    assert parse_diag(error) == ([], True, 2)  # ENOENT: a lookup of a socket that is gone
    with pytest.raises(OSError, match="malformed"):
        parse_diag(buf[:30] + struct.pack("=IHHII", 999, 20, 0, 0, 0))


class FakeDiag:
    """Sockets by (sport, dport); ``gone`` ones answer a lookup with nothing."""

    def __init__(self, socks: dict[tuple[int, int], bytes]):
        self.socks, self.gone = socks, set()
        self.dumped = 0

    def _sid(self, key: tuple[int, int]) -> SockId:
        return SockId(socket.AF_INET, key[0], key[1], bytes(48))

    def dump(self, dports: set[int]) -> list[Any]:
        self.dumped += 1
        return [(self._sid(k), parse_tcp_info(v)) for k, v in self.socks.items() if k[1] in dports]

    def lookup(self, sid: SockId) -> Any:
        key = (sid.sport, sid.dport)
        return None if key in self.gone else parse_tcp_info(self.socks[key])

    def close(self) -> None:
        pass


def test_poller_dumps_to_find_and_looks_up_between() -> None:
    diag = FakeDiag({(40000, 5201): _tcp_info(False, 5000, 10), (40001, 6000): _tcp_info(False, 1, 1)})
    p = SenderPoller(SenderRef("tb1-h1", "h1", (5201,)), diag)  # type: ignore[arg-type]
    rows = p.poll(100.0, 0.0)
    assert [r[:4] for r in rows] == [(100.0, "h1", 40000, 5201)] and len(rows[0]) == len(SENDERS_HEADER)
    assert len(p.poll(100.05, 0.05)) == 1 and diag.dumped == 1 and p.lookups == 1
    assert not p.due(4.9) and p.due(5.0)  # known sockets: dumped again only every REDISCOVER_S
    diag.gone.add((40000, 5201))
    assert p.poll(100.1, 0.1) == [] and p.known == {}
    assert p.due(1.1)  # lost one: dumped again after DISCOVER_S
    diag.gone.clear()
    assert p.poll(101.1, 1.1, may_dump=False) == [] and diag.dumped == 1  # another namespace dumps this tick
    assert len(p.poll(101.15, 1.15)) == 1 and diag.dumped == 2  # the next dump finds it again


def test_sender_config_round_trips_and_rejects_bad_keys() -> None:
    cfg = SamplerConfig(
        ports=[PortRef("tb1-s1", "s1-l1")], rate_hz=50, link_hz=50, senders=[SenderRef("tb1-l1h1", "", (5201, 5202))]
    )
    back = SamplerConfig.from_dict(cfg.to_dict())
    assert back.senders == [SenderRef("tb1-l1h1", "l1h1", (5201, 5202))] and back.sender_hz == 20.0
    with pytest.raises(ConfigError, match="sender key 'port'"):
        SenderRef.from_dict({"netns": "a", "port": 1})
    with pytest.raises(ConfigError, match="dports"):
        SenderRef("tb1-h", "h", ())
    with pytest.raises(ConfigError, match="sender_hz"):
        SamplerConfig(ports=[PortRef("tb1-s1", "s1-l1")], rate_hz=50, link_hz=50, sender_hz=100)


def test_senders_table_matches_the_schema() -> None:
    assert SCHEMAS["senders"][0] == SENDERS_HEADER


def test_bulk_senders_are_uncapped_tcp_iperf_jobs() -> None:
    jobs = [
        IperfJob(name="a", kind="iperf", src="h1", dst="h2"),
        RttProbeJob(name="r", kind="rtt_probe"),
        IperfJob(name="b", kind="iperf", src="h3", dst="h2", rate_bps=10_000_000),
        IperfJob(name="c", kind="iperf", src="h4", dst="h2", proto="udp"),
        IperfJob(name="d", kind="iperf", src="h1", dst="h3"),
    ]
    assert bulk_senders(jobs) == [("h1", 5201), ("h1", 5205)]


def _rows(node: str, sport: int, t0: float, n: int, starved_every: int = 0, **kw: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        starved = starved_every and i % starved_every == 0
        out.append(
            {
                "t": t0 + i * 0.05,
                "node": node,
                "sport": sport,
                "dport": 5201,
                "app_limited": 0,
                "notsent_bytes": 0 if starved else 90000,
                "unacked": 3 if starved else 10,
                "cwnd": 10,
                "busy_us": i * 50_000,
                "rwnd_limited_us": i * kw.get("rwnd_per_row", 0),
                "sndbuf_limited_us": 0,
            }
        )
    return out


FLOWS = [{"src": "h1", "sport": 40000, "proto": "tcp", "t_start": 10.0, "t_end": 15.0}]


def test_backlogged_sender_passes_and_its_ends_and_control_socket_are_not_judged() -> None:
    rows = _rows("h1", 40000, 10.0, 101)
    rows[0].update(notsent_bytes=0, unacked=1)  # slow start's first sample, inside sender_edge_s
    rows[-1].update(notsent_bytes=0, unacked=1)  # the drain at the end
    rows[50].update(notsent_bytes=0)  # all of a full window in flight: not starved
    control = _rows("h1", 39999, 10.0, 101, starved_every=1)  # iperf3's control connection: always idle
    c = check_senders(rows + control, FLOWS)
    assert c["ok"] is True and c["value"] == 0.0, c
    assert list(c["details"]) == ["h1:40000->5201"] and c["details"]["h1:40000->5201"]["samples"] == 81


def test_starved_sender_fails() -> None:
    c = check_senders(_rows("h1", 40000, 10.0, 101, starved_every=4), FLOWS)
    assert c["ok"] is False and "ran short" in c["reason"] and c["value"] > Thresholds().sender_short_max


def test_receive_window_share_is_reported_not_judged() -> None:
    c = check_senders(_rows("h1", 40000, 10.0, 101, rwnd_per_row=10_000), FLOWS)  # 20 % of the busy time
    assert c["ok"] is True and c["details"]["h1:40000->5201"]["window_held_share"] == pytest.approx(0.2)


def test_empty_senders_table_fails_only_when_watched() -> None:
    assert check_senders([], FLOWS, watched=True)["ok"] is False
    assert check_senders([], FLOWS)["ok"] is None
    assert check_senders(_rows("h1", 40000, 10.0, 3), FLOWS)["ok"] is None  # too few samples to judge


def test_evaluate_adds_the_check_only_with_a_senders_table() -> None:
    names = [c["name"] for c in evaluate([], [], [], [])["checks"]]
    assert "sender_backlog" not in names
    v = evaluate([], [], [], [], senders=_rows("h1", 40000, 10.0, 101, starved_every=2), flows=FLOWS)
    assert v["faithful"] is False and any(f.startswith("sender_backlog") for f in v["failed"])


def test_sampler_gap_statistics_restart_at_the_go_time(tmp_path: Path) -> None:
    """Set-up stalls before the go time are not the measured window's: the gap statistics restart at go."""
    from types import SimpleNamespace

    from testbed.telemetry.gaps import GapStats
    from testbed.telemetry.sampler import Sampler

    go = tmp_path / "go"
    cfg = SamplerConfig(ports=[PortRef("tb1-s1", "s1-l1")], rate_hz=50, link_hz=50, cpu_hz=0, go_file=str(go))
    stats = GapStats()
    for t in (0.0, 1.2, 1.22):  # a 1.2 s stall while processes start
        stats.add(t)
    pl = SimpleNamespace(ports=[], gaps=stats, sock=SimpleNamespace(close=lambda: None))
    s = Sampler(cfg, tmp_path, pollers=[pl])  # type: ignore[list-item]
    try:
        s._check_go()
        assert s.gaps_from is None and pl.gaps is stats  # no go file yet
        go.write_text(f"{time.time() + 3600:.6f}\n")
        s._check_go()
        assert s.gaps_from is None  # go time not reached
        s.go_t = time.time() - 0.1
        s._check_go()
        assert s.gaps_from == s.go_t and pl.gaps is not stats and pl.gaps.max == 0.0
    finally:
        s.close()
