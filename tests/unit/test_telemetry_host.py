"""netstat, /proc/stat and TCP_INFO parsers and the sampler config, on canned text (and a loopback socket)."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from testbed.telemetry.cpu import busy_fractions, parse_proc_stat
from testbed.telemetry.netstat import deltas, parse_counters
from testbed.telemetry.ports import ConfigError, PortRef, SamplerConfig
from testbed.telemetry.tcpinfo import parse_tcp_info, read_tcp_info

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry"


def test_netstat_and_snmp_parse() -> None:
    # captured in namespace tbd4-snd after two cubic iperf3 flows through a 300 KB bfifo that dropped
    c = parse_counters((DATA / "proc_net_netstat.txt").read_text())
    c.update(parse_counters((DATA / "proc_net_snmp.txt").read_text()))
    for key in ("TcpExt.TCPDeliveredCE", "TcpExt.TCPTimeouts", "IpExt.InCEPkts", "Tcp.RetransSegs"):
        assert key in c
    assert c["Tcp.RetransSegs"] == 14 and c["Tcp.MaxConn"] == -1 and c["Tcp.ActiveOpens"] == 3
    assert c["TcpExt.TCPDeliveredCE"] == 0  # no ECN on that path


def test_netstat_rejects_mismatched_lines() -> None:
    with pytest.raises(ValueError):
        parse_counters("Tcp: A B\nTcp: 1\n")
    with pytest.raises(ValueError):
        parse_counters("Tcp: A B\n")


def test_netstat_deltas() -> None:
    rows = [
        {"host": "h1", "phase": "start", "counter": "Tcp.RetransSegs", "value": 5},
        {"host": "h1", "phase": "end", "counter": "Tcp.RetransSegs", "value": 12},
        {"host": "h1", "phase": "end", "counter": "Tcp.OutSegs", "value": 3},
    ]
    assert deltas(rows) == {("h1", "Tcp.RetransSegs"): 7}


def test_proc_stat_parse_and_busy() -> None:
    cur = parse_proc_stat((DATA / "proc_stat.txt").read_text())
    assert set(cur) == {"all", "0", "1"}
    assert cur["all"] == (17108 + 7768 + 461 + 42, 17108 + 7768 + 97697 + 2423 + 461 + 42)
    prev = {k: (b - 50, t - 100) for k, (b, t) in cur.items()}
    assert busy_fractions(prev, cur) == {"all": 0.5, "0": 0.5, "1": 0.5}
    assert busy_fractions({"all": cur["all"]}, cur) == {"all": 0.0}  # no time passed
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1 2 3\n")


def test_tcp_info_layout_on_synthetic_bytes() -> None:
    raw = bytearray(232)
    raw[0], raw[1] = 1, 3
    struct.pack_into("=I", raw, 68, 1234)  # rtt
    struct.pack_into("=I", raw, 80, 42)  # cwnd
    struct.pack_into("=I", raw, 100, 7)  # total_retrans
    struct.pack_into("=Q", raw, 120, 10**9)  # bytes_acked
    struct.pack_into("=II", raw, 192, 900, 33)  # delivered, delivered_ce
    ti = parse_tcp_info(bytes(raw))
    assert (ti.state, ti.ca_state, ti.rtt_us, ti.snd_cwnd, ti.total_retrans) == (1, 3, 1234, 42, 7)
    assert (ti.bytes_acked, ti.delivered, ti.delivered_ce) == (10**9, 900, 33)
    old = parse_tcp_info(bytes(raw[:104]))  # a pre-4.x kernel's shorter struct
    assert old.snd_cwnd == 42 and old.bytes_acked is None and old.delivered_ce is None
    with pytest.raises(ValueError):
        parse_tcp_info(b"\0" * 50)


def test_tcp_info_from_a_loopback_connection() -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv, socket.create_connection(srv.getsockname()) as cli:
        peer, _ = srv.accept()
        with peer:
            cli.sendall(b"x" * 200_000)
            got = 0
            while got < 200_000:
                got += len(peer.recv(65536))
            ti = read_tcp_info(cli)
            assert ti.state == 1 and ti.snd_cwnd > 0 and ti.rtt_us > 0 and ti.total_retrans == 0
            assert ti.bytes_sent == 200_000 and read_tcp_info(peer.fileno()).bytes_received == 200_000


def test_config_round_trip_and_errors() -> None:
    cfg = SamplerConfig.from_dict({"ports": [{"netns": "tb3fa2-s1", "dev": "s1-l1", "leaf_handle": "10:"}]})
    assert cfg.ports[0].node == "s1" and cfg.links_netns == ["tb3fa2-s1"] and cfg.rate_hz == 1000
    assert SamplerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="leaf_hande"):
        SamplerConfig.from_dict({"ports": [{"netns": "a", "dev": "b", "leaf_hande": "10:"}]})
    with pytest.raises(ConfigError, match="rate_hz"):
        SamplerConfig(ports=[PortRef("a", "b")], rate_hz=0)
    with pytest.raises(ConfigError, match="twice"):
        SamplerConfig(ports=[PortRef("a", "b"), PortRef("a", "b")])
    with pytest.raises(ConfigError, match="handle"):
        PortRef("a", "b", leaf="10")
    with pytest.raises(ConfigError, match="at least one"):
        SamplerConfig(ports=[])
