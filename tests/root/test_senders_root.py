"""senders.csv from a real iperf3 sender, and the sender_backlog guardrail on it: a backlogged client passes, a
client that paces itself far below the link (``-b``: its socket is empty most of the time) is judged starved."""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from bench.benchnet import LineNet, line_net
from results.fidelity.senders import check_senders
from testbed.host.procs import ProcessGroup
from testbed.host.waiting import wait_listening
from testbed.telemetry import start_sampler
from testbed.telemetry.ports import SenderRef
from traffic.iperf import parse_iperf

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc)"),
    pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed"),
]
SECONDS = 3


@pytest.fixture(scope="module")
def net() -> LineNet:
    with line_net("tbd6", rate="50mbit", limit=300000, mtu=1500) as n:
        yield n


def _flow(net: LineNet, tmp_path: Path, extra: list[str]) -> tuple[list[dict], list[dict], dict]:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "j.iperf.json").write_text(json.dumps({"job": "j", "src": "snd", "dst": "rcv", "proto": "tcp", "cycles": 1}))
    with ProcessGroup() as procs:
        srv = procs.spawn("iperf3-s", ["iperf3", "-s", "-1", "-p", "5201"], netns=net.rcv)
        wait_listening(net.rcv, 5201)
        handle = start_sampler(
            procs, [net.port], tmp_path, rate_hz=200, link_hz=50, senders=[SenderRef(net.snd, "snd", (5201,))]
        )
        (raw / "j.c0.t0").write_text(f"{time.time():.6f}\n")
        argv = ["iperf3", "-c", net.rcv_ip, "-p", "5201", "-J", "-t", str(SECONDS), "--logfile", str(raw / "j.c0.json")]
        cli = procs.spawn("iperf3-c", argv + extra, netns=net.snd)
        assert cli.wait(SECONDS + 15) == 0, (raw / "j.c0.json").read_text()[-400:]
        srv.wait(10)
        health = handle.stop()
    with open(tmp_path / "senders.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return rows, parse_iperf(raw, "j")["flows"], health


def test_backlogged_iperf3_sender_keeps_data_to_send(net: LineNet, tmp_path: Path) -> None:
    rows, flows, health = _flow(net, tmp_path, [])
    (flow,) = flows
    mine = [r for r in rows if int(r["sport"]) == flow["sport"]]
    assert len(mine) >= 2 * 20, f"{len(mine)} samples of the data stream in {SECONDS} s at 20 Hz"
    assert int(mine[-1]["bytes_acked"]) > int(mine[0]["bytes_acked"]) > 0
    assert health["senders"]["snd"]["dumps"] >= SECONDS - 1 and health["senders"]["snd"]["lookups"] > 0
    c = check_senders(rows, flows, watched=True)
    print(c["reason"])
    assert c["ok"] is True, c


def test_self_paced_iperf3_sender_is_judged_starved(net: LineNet, tmp_path: Path) -> None:
    rows, flows, _health = _flow(net, tmp_path, ["-b", "5M"])  # a tenth of the 50 Mbit/s link
    c = check_senders(rows, flows, watched=True)
    print(c["reason"])
    assert c["ok"] is False and c["value"] > 0.5, c
