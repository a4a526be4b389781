"""The real generators, worker and parsers end to end on loopback (no root: every host is a 127.0.1.x address
of this namespace), including failure and timeout paths."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from results.stall_causes import StallTables, judge_stalls
from testbed.host.capabilities import Capabilities
from testbed.host.procs import ProcessGroup
from testbed.spec.topology import HostInfo
from testbed.spec.workload import parse_workload
from traffic.base import GeneratorError, RunContext
from traffic.workload import run_workload

HOSTS = {f"h{i}": HostInfo(f"h{i}", f"127.0.1.{i + 1}", f"l{i // 2}") for i in range(4)}
HOLD_S = 1.0  # longer than the watchdog's bound (two RTOs of at least 200 ms)


def run(tmp_path: Path, jobs: list[dict], timeout: float = 60) -> dict[str, list[dict]]:
    with ProcessGroup() as pg:
        return run_workload(parse_workload(jobs), RunContext(HOSTS, pg, tmp_path), Capabilities(), timeout)


@pytest.mark.parametrize(
    ("kind", "algo"),
    [
        ("allreduce", "ring"),
        ("allreduce", "hierarchical"),
        ("allreduce", "tree"),
        ("allreduce", "halving_doubling"),
        ("allgather", "ring"),
        ("reduce_scatter", "ring"),
        ("broadcast", "tree"),
        ("alltoall", "pairwise"),
    ],
)
def test_collectives_on_loopback(tmp_path: Path, kind: str, algo: str) -> None:
    t = run(
        tmp_path,
        [
            {
                "kind": kind,
                "name": "c",
                "algorithm": algo,
                "size": "256KB",
                "iterations": 2,
                "bucket": 2 if kind == "allreduce" else 1,
                "compute_gap": "10ms",
                "cc": "reno",
            }
        ],
    )
    its = [r for r in t["iterations"] if not r["warmup"]]
    assert len(its) == 2 and all(r["t_end"] > r["t_start"] for r in its)
    assert sum(s["bytes"] for s in t["steps"] if s["op"] == "send") == sum(
        s["bytes"] for s in t["steps"] if s["op"] == "recv"
    )
    assert t["stalls"] == []  # the watchdog watched and nothing stalled
    assert all(r["retrans"] is not None for r in t["iterations"])


def test_a_rank_held_still_is_a_stall_its_peer_records(tmp_path: Path) -> None:
    """SIGSTOP rank 1 of a ring at the go time, for a second: rank 0's 8 MB message to it fills rank 1's receive
    window, so rank 0's watchdog records a send stall, ended when rank 1 runs again, with the closed window the
    guardrail reads as the receiver's."""
    jobs = [{"kind": "allreduce", "name": "c", "algorithm": "ring", "size": "24MB", "iterations": 1, "warmup": 0,
             "ranks": ["h0", "h1", "h2"], "cc": "reno"}]  # fmt: skip
    held: list[float] = []

    def hold(_go: float) -> None:  # traffic starts 30 ms after the go file is written: rank 1 never starts it
        rank1 = next(p for p in pg.procs if p.name == "c:rank1")
        os.kill(rank1.pid, signal.SIGSTOP)
        held.append(time.time())
        threading.Timer(HOLD_S, os.kill, (rank1.pid, signal.SIGCONT)).start()

    with ProcessGroup() as pg:
        ctx = RunContext(HOSTS, pg, tmp_path, go_file=tmp_path / "go")
        t = run_workload(parse_workload(jobs), ctx, Capabilities(), 60, on_go=hold)
    rows = [r for r in t["stalls"] if (r["side"], r["rank"], r["peer"]) == ("send", "h0", "h1")]
    assert len(rows) == 1, t["stalls"]
    row = rows[0]
    # the receiver's kernel takes a little more as it compacts its queue, then nothing until rank 1 runs again
    assert held[0] <= row["t_start"] and row["t_end"] is not None and row["duration_s"] > row["bound_s"] >= 0.4
    assert -0.05 < row["t_end"] - (held[0] + HOLD_S) < 0.3
    assert row["notsent_bytes"] > 0
    (st,) = judge_stalls(StallTables(stalls=t["stalls"]))
    assert st.cause == "receiver did not read"


def test_ps_and_background_jobs_together(tmp_path: Path) -> None:
    t = run(
        tmp_path,
        [
            {
                "kind": "ps",
                "name": "ps",
                "workers": ["h0", "h1", "h2"],
                "servers": ["h3"],
                "size": "300KB",
                "iterations": 2,
            },
            {
                "kind": "rtt_probe",
                "name": "rtt",
                "pairs": [["h0", "h3"]],
                "interval": "20ms",
                "duration": 0.6,
                "proto": "udp",
            },
            {
                "kind": "shortflows",
                "name": "sf",
                "senders": ["h1"],
                "receiver": "h2",
                "sizes": "50KB",
                "count": 5,
                "concurrency": 2,
                "start_after": 0.1,
            },
        ],
    )
    server_recv = sum(s["bytes"] for s in t["steps"] if s["rank"] == "h3" and s["op"] == "recv" and s["iter"] == 1)
    assert server_recv == 3 * 307_200
    # a UDP request not answered before the next is due is recorded lost (None): on a loaded machine a loopback
    # echo can take that long, so the probe is judged on its schedule and on most requests being answered
    answered = [r["rtt_s"] for r in t["rtt"] if r["rtt_s"] is not None]
    assert len(t["rtt"]) >= 30 and len(answered) >= len(t["rtt"]) // 2
    assert all(x > 0 for x in answered)
    assert len(t["fct"]) == 5


def test_failing_rank_fails_the_job_with_its_stderr(tmp_path: Path) -> None:
    hosts = dict(HOSTS)
    hosts["h3"] = HostInfo("h3", "192.0.2.1", "l1")  # not an address of this machine: its worker cannot listen
    t0 = time.monotonic()
    with ProcessGroup() as pg, pytest.raises(GeneratorError, match="rank3") as ei:
        run_workload(
            parse_workload([{"kind": "allreduce", "name": "c", "size": "64KB", "timeout": 5}]),
            RunContext(hosts, pg, tmp_path),
            Capabilities(),
            30,
        )
    assert "traffic.worker" in str(ei.value)  # the stderr tail is in the message
    assert time.monotonic() - t0 < 25


def test_stalled_job_times_out(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(GeneratorError, match="timed out"):
        run(
            tmp_path,
            [
                {
                    "kind": "pipeline",
                    "name": "pp",
                    "stages": ["h0", "h1"],
                    "compute": "2s",
                    "microbatches": 4,
                    "iterations": 1,
                    "warmup": 0,
                }
            ],
            timeout=1.5,
        )
    assert time.monotonic() - t0 < 10


def test_gated_jobs_start_traffic_only_at_the_go_time(tmp_path: Path) -> None:
    """With the start gate every process sets up first: no iteration, flow, probe or iperf3 byte comes before the
    go time, and a job's start_after counts from it."""
    events: list[tuple[str, str]] = []
    gos: list[float] = []
    jobs = [
        {"kind": "allreduce", "name": "ar", "size": "64KB", "iterations": 2, "ranks": ["h0", "h1", "h2", "h3"]},
        {"kind": "incast", "name": "inc", "senders": ["h1", "h2"], "receiver": "h0", "sizes": "20KB", "count": 3},
        {"kind": "rtt_probe", "name": "rtt", "pairs": [["h3", "h0"]], "interval": "5ms", "duration": 0.2},
        {"kind": "shortflows", "name": "sf", "senders": ["h1"], "receiver": "h3", "sizes": "20KB", "count": 3},
        {"kind": "iperf", "name": "bg", "src": "h2", "dst": "h3", "duration": 1, "start_after": 0.2},
    ]
    with ProcessGroup() as pg:
        ctx = RunContext(HOSTS, pg, tmp_path, go_file=tmp_path / "go")
        t = run_workload(
            parse_workload(jobs), ctx, Capabilities(), 60, on_event=lambda k, d: events.append((k, d)), on_go=gos.append
        )
    assert len(gos) == 1 and [k for k, _ in events].count("go") == 1
    kinds = [k for k, _ in events]
    assert kinds.index("go") > max(i for i, k in enumerate(kinds) if k == "started")  # every job set up first
    go = gos[0]
    assert min(r["t_start"] for r in t["iterations"]) >= go
    assert min(r["t_start"] for r in t["fct"]) >= go
    assert min(r["t_send"] for r in t["rtt"]) >= go
    iperf = [r for r in t["flows"] if r["job"] == "bg"]
    assert iperf and min(r["t_start"] for r in iperf) >= go + 0.2


def test_every_flow_leaves_from_its_placed_source_port(tmp_path: Path) -> None:
    """Rank connections, iperf3 streams and short flows bind the ports ctx.ports placed (flows.csv, fct.csv)."""
    from traffic.placement import SourcePorts

    jobs = [
        {"kind": "allreduce", "name": "ar", "algorithm": "ring", "size": "64KB", "iterations": 1},
        {"kind": "incast", "name": "inc", "senders": ["h1", "h2"], "receiver": "h0", "sizes": "20KB", "count": 2},
        {"kind": "iperf", "name": "bg", "src": "h2", "dst": "h3", "duration": 1, "parallel": 2},
    ]
    with ProcessGroup() as pg:
        ctx = RunContext(HOSTS, pg, tmp_path, ports=SourcePorts(seed=11))
        t = run_workload(parse_workload(jobs), ctx, Capabilities(), 60)
    placed = {(r["host"], r["job"], r["flow"]): r["sport"] for r in ctx.ports.rows()}
    # a ring sends rank r -> r+1: ranks 0..2 opened their connection (placed sport), rank 3 sends to rank 0 over
    # the connection rank 0 opened (its sport the listener's, its dport rank 0's placed port)
    ring = {r["flow_id"]: (r["sport"], r["dport"]) for r in t["flows"] if r["job"] == "ar"}
    assert ring == {
        "ar.r0.p1": (placed[("h0", "ar", "0->1/ch0")], 20000),
        "ar.r1.p2": (placed[("h1", "ar", "1->2/ch0")], 20000),
        "ar.r2.p3": (placed[("h2", "ar", "2->3/ch0")], 20000),
        "ar.r3.p0": (20000, placed[("h0", "ar", "0->3/ch0")]),
    }
    fct = t["fct"]
    assert len(fct) == 4 and all(r["sport"] == placed[(r["src"], "inc", f"f{r['flow_id']}")] for r in fct)
    bg = sorted(r["sport"] for r in t["flows"] if r["job"] == "bg")
    assert bg == sorted(placed[("h2", "bg", f"c0.s{i}")] for i in range(2)) and bg[1] == bg[0] + 1
