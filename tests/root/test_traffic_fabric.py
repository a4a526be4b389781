"""The traffic generators on a 2-spine, 4-leaf, 2-hosts-per-leaf fabric at 50 Mbit/s, MTU 9000 (root).

50 Mbit/s: at 100 the ring broadcast's workers forward 32 KB slices fast enough to be CPU-bound when the
hypervisor takes the machine (measured/ideal p50 1.27 against 1.25 in one CI pass); the buffers stay in frames.
"""

from __future__ import annotations

import fcntl
import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.spec.units import parse_size
from testbed.spec.workload import parse_workload
from traffic.base import RunContext
from traffic.ranked import bubble_fraction
from traffic.schedule import pipeline_order
from traffic.workload import run_workload

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (builds namespaces)"),
]

FABRIC = {
    "topology": "spine-leaf",
    # one spine (100 Mbit/s uplinks, 1:1): with two, ECMP hashed the all-to-all's 12 cross-leaf flows of a leaf
    # over its uplinks by their ephemeral ports, and a 9:3 split put 9/8 S on one 50 Mbit/s uplink against the
    # host link's 7/8 S: CI25 measured 1.255 x ideal (1.028 in an earlier run). The ideal assumes no collision.
    "spines": 1,
    "leaves": 4,
    "hosts_per_leaf": 2,
    "oversubscription": "1:1",
    # 1 MB egress buffers: with 300 KB the all-to-all's 7-flow incast drops and hits retransmission timeouts
    # (measured p50 1.32 x ideal with 4 channels); every other test here passes with 300 KB too
    "host_link": {"rate": "50Mbit", "buffer": "1MB", "mtu": 9000},
}
S = parse_size("4MB").to_bytes(9000)  # the jobs' size, as tc reads it: 4 x 2**20 bytes


@pytest.fixture(scope="module")
def fab() -> Iterator[Any]:
    from testbed.fabric.build import Fabric
    from testbed.spec.fabric import FabricSpec

    with open("/run/testbed-bench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # timing measurements: nobody else measures on the 2 cores meanwhile
        with Fabric(FabricSpec.from_dict(FABRIC, "fabric"), lock_wait=1800) as f:
            yield f


def run(fab: Any, tmp_path: Path, jobs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    ctx = RunContext(fab.hosts, fab.procs, tmp_path / "raw", fab.host_link)
    return run_workload(parse_workload(jobs), ctx, fab.caps, timeout=120, predict_path=fab.predict_path)


def ratios(tables: dict[str, list[dict[str, Any]]], job: str) -> list[float]:
    rows = [r for r in tables["iterations"] if r["job"] == job and not r["warmup"]]
    assert rows, f"no measured iterations of {job}"
    return sorted((r["t_end"] - r["t_start"]) / r["ideal_s"] for r in rows)


def tx_bytes(fab: Any, node: str) -> dict[str, int]:
    out = subprocess.run(["ip", "-n", fab.netns(node), "-s", "-j", "link"], check=True, capture_output=True, text=True)
    return {d["ifname"]: d["stats64"]["tx"]["bytes"] for d in json.loads(out.stdout) if d["ifname"] != "lo"}


def spine_bytes(fab: Any) -> int:
    return sum(sum(tx_bytes(fab, s).values()) for s in fab.topo.nodes if fab.topo.nodes[s].layer == "spine")


def test_ring_allreduce_meets_ideal_and_is_not_cpu_bound(fab: Any, tmp_path: Path) -> None:
    t0 = time.time()
    tables = run(fab, tmp_path, [{"kind": "allreduce", "name": "ar", "size": "4MB", "iterations": 10, "cc": "cubic"}])
    wall = time.time() - t0
    r = ratios(tables, "ar")
    cpu = sum(row["cpu_s"] for row in tables["worker_cpu"])
    print(
        f"ring all-reduce measured/ideal p50 {statistics.median(r):.3f} max {r[-1]:.3f}; "
        f"worker CPU {cpu:.2f} s over {wall:.2f} s wall = {cpu / wall / os.cpu_count():.0%} of the machine"
    )
    assert statistics.median(r) <= 1.11, r
    assert r[-1] <= 1.25, r
    assert cpu / wall / (os.cpu_count() or 1) < 0.5  # network-bound: the workers use well under the 2 cores
    steps = [s for s in tables["steps"] if s["iter"] == 3 and s["rank"] == "l1h1" and s["op"] == "send"]
    assert sorted(s["step"] for s in steps) == list(range(14))  # 2(N-1) steps
    assert sum(s["bytes"] for s in steps) == 2 * 7 * S // 8
    flows = [f for f in tables["flows"] if f["job"] == "ar"]
    assert len(flows) == 8 and all(f["path"].startswith(f["src"]) and f["path"].endswith(f["dst"]) for f in flows)


def test_hierarchical_crosses_spines_with_fewer_bytes(fab: Any, tmp_path: Path) -> None:
    per_iter = {}
    for name, algo, ranks in (
        ("flat", "ring", "leaf_interleaved"),
        ("topo", "ring", "all"),
        ("hier", "hierarchical", "all"),
    ):
        before = spine_bytes(fab)
        tables = run(
            fab,
            tmp_path / name,
            [
                {
                    "kind": "allreduce",
                    "name": name,
                    "algorithm": algo,
                    "ranks": ranks,
                    "size": "4MB",
                    "iterations": 3,
                    "warmup": 0,
                }
            ],
        )
        per_iter[name] = (spine_bytes(fab) - before) / 3
        print(
            name,
            f"{per_iter[name] / 1e6:.2f} MB across the spines per iteration",
            f"measured/ideal p50 {statistics.median(ratios(tables, name)):.3f}",
        )
    # payload: flat ring 2(N-1)S = 14 S, topology-ordered ring 2L(N-1)/N S = 7 S, hierarchical 2(L-1) S = 6 S
    assert per_iter["hier"] == pytest.approx(6 * S, rel=0.05)
    assert per_iter["flat"] / per_iter["hier"] >= 2 * 0.9  # about hosts-per-leaf (2) times fewer
    assert per_iter["topo"] / per_iter["hier"] == pytest.approx(7 / 6, rel=0.05)


@pytest.mark.parametrize("kind", ["allgather", "reduce_scatter", "broadcast", "alltoall"])
def test_other_collectives_near_ideal(fab: Any, tmp_path: Path, kind: str) -> None:
    tables = run(fab, tmp_path, [{"kind": kind, "name": kind, "size": "4MB", "iterations": 10}])
    r = ratios(tables, kind)
    rows = [x for x in tables["iterations"] if not x["warmup"]]
    print(
        kind, f"measured/ideal p50 {statistics.median(r):.3f} max {r[-1]:.3f}; busbw factor {rows[0]['busbw_factor']}"
    )
    assert statistics.median(r) <= 1 / 0.8, r


def test_parameter_server_incast_on_server_downlink(fab: Any, tmp_path: Path) -> None:
    workers = ["l1h1", "l1h2", "l2h1", "l2h2", "l3h1", "l3h2", "l4h1"]
    leaves = ("l1", "l2", "l3", "l4")
    before = {leaf: tx_bytes(fab, leaf) for leaf in leaves}
    peak: dict[str, int] = {}
    stop = threading.Event()

    def sample() -> None:  # backlog of every leaf egress queue, ~20 Hz
        while not stop.is_set():
            for leaf in leaves:
                out = subprocess.run(
                    ["tc", "-n", fab.netns(leaf), "-s", "-j", "qdisc", "show"],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                for q in json.loads(out.stdout or "[]"):
                    if q.get("kind") == "bfifo":
                        key = f"{leaf}:{q['dev']}"
                        peak[key] = max(peak.get(key, 0), q.get("backlog", 0))
            time.sleep(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        tables = run(
            fab,
            tmp_path,
            [
                {
                    "kind": "ps",
                    "name": "ps",
                    "workers": workers,
                    "servers": ["l4h2"],
                    "size": "2MB",
                    "iterations": 5,
                    "warmup": 0,
                }
            ],
        )
    finally:
        stop.set()
        th.join(5)
    after = {leaf: tx_bytes(fab, leaf) for leaf in leaves}
    server_down = after["l4"]["l4-l4h2"] - before["l4"]["l4-l4h2"]
    worker_down = after["l1"]["l1-l1h1"] - before["l1"]["l1-l1h1"]
    hottest = max(peak, key=lambda k: peak[k])
    print(
        f"PS: server downlink {server_down / 5 / 1e6:.2f} MB/iter, worker downlink {worker_down / 5 / 1e6:.2f} "
        f"MB/iter, ratio {server_down / worker_down:.2f}; hottest queue {hottest} peak {peak[hottest]} B; "
        f"measured/ideal p50 {statistics.median(ratios(tables, 'ps')):.3f}"
    )
    assert server_down / worker_down == pytest.approx(7, rel=0.1)
    assert hottest == "l4:l4-l4h2"


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_order_and_bubble(fab: Any, tmp_path: Path, schedule: str) -> None:
    stages = ["l1h1", "l2h1", "l3h1", "l4h1"]
    tables = run(
        fab,
        tmp_path,
        [
            {
                "kind": "pipeline",
                "name": "pp",
                "stages": stages,
                "microbatches": 8,
                "activation": "20KB",
                "gradient": "20KB",
                "compute": "40ms",
                "schedule": schedule,
                "iterations": 3,
                "warmup": 1,
            }
        ],
    )
    rows = tables["pipeline"]
    for s in range(4):
        comp = sorted(
            (r for r in rows if r["iter"] == 2 and r["stage"] == s and r["op"] == "compute"), key=lambda r: r["t_start"]
        )
        assert [(r["phase"], r["microbatch"]) for r in comp] == pipeline_order(s, 4, 8, schedule)
    bubbles = [bubble_fraction(rows, i) for i in (1, 2, 3)]
    print(schedule, "bubble", [round(b, 3) for b in bubbles], "ideal", round(3 / 11, 3))
    # compute dominates (40 ms per micro-batch vs 1.6 ms per 20 KB transfer): the bubble is GPipe's (P-1)/(M+P-1)
    assert statistics.median(bubbles) == pytest.approx(3 / 11, abs=0.03)


def test_background_probes_and_trains(fab: Any, tmp_path: Path) -> None:
    from traffic.scapy_train import check_capture

    tables = run(
        fab,
        tmp_path,
        [
            {"kind": "iperf", "name": "bg", "src": "l1h1", "dst": "l3h1", "duration": 2, "cc": "cubic"},
            {
                "kind": "iperf",
                "name": "bgu",
                "src": "l2h1",
                "dst": "l4h1",
                "proto": "udp",
                "rate": "20Mbit",
                "duration": 1,
                "on": 1,
                "off": 0.5,
            },
            {"kind": "rtt_probe", "name": "rtt", "pairs": [["l1h2", "l3h2"]], "interval": "20ms", "duration": 2},
            {
                "kind": "incast",
                "name": "inc",
                "senders": ["l1h2", "l2h1", "l2h2", "l3h2"],
                "receiver": "l4h2",
                "sizes": "200KB",
                "count": 5,
            },
            {
                "kind": "shortflows",
                "name": "sf",
                "senders": ["l3h1"],
                "receiver": "l2h1",
                "sizes": [["10KB", 3], ["1MB", 1]],
                "count": 10,
                "concurrency": 2,
            },
            {"kind": "scapy_train", "name": "tr", "src": "l1h1", "dst": "l2h2", "trains": 5, "burst": 16, "size": 1000},
        ],
    )
    bg = [f for f in tables["flows"] if f["job"] == "bg"]
    assert len(bg) == 1 and bg[0]["goodput_bps"] > 0.85 * fab.host_link.payload_rate_bps
    udp = [f for f in tables["flows"] if f["job"] == "bgu"]
    assert len(udp) == 1 and udp[0]["goodput_bps"] == pytest.approx(20e6, rel=0.1)
    rtt = [r["rtt_s"] for r in tables["rtt"]]
    assert len(rtt) >= 90 and 0 < statistics.median(rtt) < 0.05
    fct = tables["fct"]
    assert len([r for r in fct if r["job"] == "inc"]) == 20 and len([r for r in fct if r["job"] == "sf"]) == 10
    trains = tables["trains"]
    assert len(trains) == 5 and check_capture(trains, "ect0") == []
    print(
        f"iperf tcp {bg[0]['goodput_bps'] / 1e6:.1f} Mbit/s, udp {udp[0]['goodput_bps'] / 1e6:.1f} Mbit/s, "
        f"rtt p50 {statistics.median(rtt) * 1e3:.2f} ms, incast fct p50 "
        f"{statistics.median(r['t_end'] - r['t_start'] for r in fct if r['job'] == 'inc') * 1e3:.1f} ms"
    )
