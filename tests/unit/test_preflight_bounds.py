"""The time bound of testbed.plan.bounds, without root: what a job needs at the least against what it has."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.plan import bounds
from testbed.spec.fields import SpecError
from testbed.spec.scenario import load_scenario, load_scenario_file
from testbed.spec.topology import Topology

REPO = Path(__file__).resolve().parents[2]
FABRIC = {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "host_link": {"rate": "50Mbit", "mtu": 9000}}


def _check(workload: list[dict], duration: str = "60s", fabric: dict | None = None) -> None:
    sc = load_scenario({"name": "x", "fabric": fabric or FABRIC, "workload": workload, "duration": duration})
    bounds.check_time(sc.workload, Topology(sc.fabric), sc.duration_s)


def test_ring_need_is_its_ideal_time() -> None:
    sc = load_scenario(
        {"name": "x", "fabric": FABRIC, "workload": [{"kind": "allreduce", "name": "ar", "size": "4MB"}]}
    )
    need = bounds.job_need(sc.workload[0], Topology(sc.fabric))
    payload_Bps = 50e6 * (9000 - 52) / 9014 / 8
    assert need.iteration_s == pytest.approx(2 * 3 / 4 * 4 * 2**20 / payload_Bps)
    assert need.total_s == pytest.approx(11 * need.iteration_s)  # 1 warmup + 10 iterations


def test_huge_size_is_refused_by_its_iteration_timeout() -> None:
    with pytest.raises(SpecError, match=r"one iteration needs at least .* above the job's timeout of 60 s") as exc:
        _check([{"kind": "allreduce", "name": "ar", "size": 1e18}])
    assert exc.value.path == "workload[0].size"


def test_iterations_beyond_the_duration_are_refused() -> None:
    with pytest.raises(SpecError, match=r"above the scenario's duration of 20 s") as exc:
        _check([{"kind": "allreduce", "name": "ar", "size": "4MB", "iterations": 100}], duration="20s")
    assert exc.value.path == "workload[0].size"
    _check([{"kind": "allreduce", "name": "ar", "size": "4MB", "iterations": 10}], duration="20s")  # 11 x 0.97 s


def test_start_after_counts() -> None:
    job = {"kind": "iperf", "name": "f", "src": "l1h1", "dst": "l2h1", "duration": 10}
    _check([job], duration="15s")
    with pytest.raises(SpecError, match=r"after start_after 6 s, above the scenario's duration of 15 s"):
        _check([{**job, "start_after": "6s"}], duration="15s")


def test_the_fastest_link_sets_the_bound() -> None:
    """A port overridden faster than the host links lowers the bound: it never refuses what could finish."""
    job = [{"kind": "ps", "name": "ps", "workers": ["l2h1", "l2h2"], "servers": ["l1h1"], "size": "20MB"}]
    with pytest.raises(SpecError, match=r"workload\[0\]\.size"):
        _check(job, duration="60s")  # 11 x 2 x 20 MB at 50 Mbit/s: 70 s
    fast = {**FABRIC, "overrides": [{"port": "l1->l1h1", "rate": "200Mbit"}]}
    _check(job, duration="60s", fabric=fast)


def test_incast_rounds_at_the_receiver() -> None:
    job = {"kind": "incast", "name": "i", "senders": ["l2h1", "l2h2"], "receiver": "l1h1", "sizes": "10MB"}
    with pytest.raises(SpecError, match=r"workload\[0\].count: needs at least .*40 flows of at least 10,485,760"):
        _check([job], duration="30s")  # 20 rounds x 2 senders x 10 MB at 50 Mbit/s: 64 s


@pytest.mark.parametrize("path", sorted((REPO / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_point_fits_with_room(path: Path) -> None:
    """Every shipped scenario point needs at most half its duration (and of each iteration timeout) at the least."""
    for point in load_scenario_file(path).points:
        topo = Topology(point.fabric)
        for i, job in enumerate(point.workload):
            need = bounds.job_need(job, topo)
            assert job.start_after + need.total_s <= 0.5 * point.duration_s, (point.variant, i, need)
            timeout = getattr(job, "timeout", None)
            assert not need.iteration_s or need.iteration_s <= 0.5 * timeout, (point.variant, i, need)


def test_node_ceiling_is_checked_when_the_file_is_read() -> None:
    with pytest.raises(SpecError, match=r"^fabric: 64 x 254 x 254 is 64834 nodes .* at most 1000$"):
        load_scenario({"name": "x", "fabric": {"spines": 64, "leaves": 254, "hosts_per_leaf": 254}})
    with pytest.raises(SpecError, match=r"k = 16 is 1344 nodes"):
        load_scenario({"name": "x", "fabric": {"topology": "fat-tree", "k": 16}})
    assert load_scenario({"name": "x", "fabric": {"topology": "fat-tree", "k": 4}}).fabric.node_count == 36


def test_node_count_matches_the_topology() -> None:
    for fabric in ({"spines": 3, "leaves": 5, "hosts_per_leaf": 4}, {"topology": "fat-tree", "k": 6}):
        spec = load_scenario({"name": "x", "fabric": fabric}).fabric
        assert spec.node_count == len(Topology(spec).nodes)


def test_fabric_memory_against_what_is_available() -> None:
    spec = load_scenario({"name": "x", "fabric": {"topology": "fat-tree", "k": 12}}).fabric  # 612 nodes
    need = 612 * bounds.NODE_MEMORY_BYTES
    bounds.check_fabric_size(spec, available=int(need / bounds.MEMORY_SHARE) + 1)
    with pytest.raises(
        SpecError, match=r"^fabric: 612 nodes need about 0.6 GB .* of the 1.2 GB this machine has available$"
    ):
        bounds.check_fabric_size(spec, available=int(need / bounds.MEMORY_SHARE) - 1)


def test_mem_available_reads_meminfo(tmp_path: Path) -> None:
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n")
    assert bounds.mem_available_bytes(f) == 20_000_000 * 1024
    f.write_text("MemTotal: 1 kB\n")
    assert bounds.mem_available_bytes(f) is None
    assert bounds.mem_available_bytes(tmp_path / "missing") is None
