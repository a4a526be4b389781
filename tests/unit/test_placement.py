"""Flow placement: the source-port allocator, the scenario's ``placement:`` key, and what the generators are given."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from testbed.spec.fields import SpecError
from testbed.spec.placement import EPHEMERAL, PLACED_PORTS, PlacementSpec, check_capacity, placement_seed
from testbed.spec.scenario import expand
from testbed.spec.topology import HostInfo
from testbed.spec.workload import parse_job, parse_workload
from traffic.base import RunContext
from traffic.placement import PlacementError, SourcePorts

HOSTS = {f"h{i}": HostInfo(f"h{i}", f"10.0.0.{i + 1}", f"l{i // 2}") for i in range(4)}


# --- SourcePorts --------------------------------------------------------------------------------------------------


def test_same_seed_same_ports_other_seed_other_ports() -> None:
    keys = [("h0", "ar", f"0->{p}/ch0") for p in range(1, 40)]
    a, b, c = SourcePorts(seed=3), SourcePorts(seed=3), SourcePorts(seed=4)
    pa = [a.sport(*k) for k in keys]
    assert pa == [b.sport(*k) for k in keys]
    assert all(p in PLACED_PORTS for p in pa)
    pc = [c.sport(*k) for k in keys]
    assert sum(x != y for x, y in zip(pa, pc, strict=True)) >= 35  # a new draw: almost every port moves


def test_a_port_is_independent_of_other_flows_but_never_given_twice_on_a_host() -> None:
    alone = SourcePorts(seed=9).sport("h1", "ar", "1->2/ch0")
    busy = SourcePorts(seed=9)
    others = [busy.sport("h1", "sf", f"f{i}") for i in range(300)]
    mine = busy.sport("h1", "ar", "1->2/ch0")
    assert mine == alone or alone in others  # moved only when another flow had its port
    assert len(set(others + [mine])) == 301
    again = busy.sport("h1", "ar", "1->2/ch0")  # the same key twice: a second port, never the same one
    assert again != mine
    assert SourcePorts(seed=9).sport("h2", "ar", "1->2/ch0") == alone  # another host: its own ports


def test_collision_moves_to_the_next_free_port() -> None:
    sp = SourcePorts(seed=1)
    first = sp.sport("h0", "j", "a")
    twin = next(f"b{i}" for i in range(200_000) if SourcePorts(seed=1)._start("j", f"b{i}") == first - PLACED_PORTS[0])
    second = sp.sport("h0", "j", twin)
    assert second == (first + 1 if first + 1 in PLACED_PORTS else PLACED_PORTS[0])
    assert SourcePorts(seed=1).sport("h1", "j", twin) == first  # on another host the hash's own pick


def test_full_host_is_refused_in_one_line() -> None:
    free = PLACED_PORTS[100]
    sp = SourcePorts(seed=0, reserved={"h0": frozenset(PLACED_PORTS) - {free}})
    assert sp.sport("h0", "j", "x") == free
    with pytest.raises(PlacementError) as err:
        sp.sport("h0", "j", "y")
    assert "h0" in str(err.value) and "\n" not in str(err.value)


def test_block_is_consecutive_free_and_listed() -> None:
    sp = SourcePorts(seed=2)
    start = sp.block("h0", "bg", ["c0.s0"])[0]
    sp2 = SourcePorts(seed=2, reserved={"h0": frozenset({start + 1})})
    block = sp2.block("h0", "bg", ["c0.s0", "c0.s1", "c0.s2"])
    assert block == list(range(block[0], block[0] + 3)) and start + 1 not in block
    assert [r["flow"] for r in sp2.rows()] == ["c0.s0", "c0.s1", "c0.s2"]
    assert [r["sport"] for r in sp2.rows()] == block


def test_kernel_mode_gives_port_zero_and_lists_nothing() -> None:
    sp = SourcePorts(seed=None)
    assert not sp.placed
    assert sp.sport("h0", "j", "f") == 0 and sp.block("h0", "j", ["a", "b"]) == [0, 0]
    assert sp.rows() == []


def test_claim_lists_a_fixed_port_and_refuses_a_taken_one() -> None:
    sp = SourcePorts(seed=0, reserved={"h0": frozenset({40000})})
    assert sp.claim("h0", "bg", "c0.s0", 40000) == 40000
    placed = sp.sport("h1", "x", "f")
    sp.claim("h1", "bg", "c0.s0", placed + 1)
    with pytest.raises(PlacementError, match="taken"):
        sp.claim("h1", "other", "c0.s0", placed)


def test_placement_seed_is_the_seed_and_repeat_only() -> None:
    assert placement_seed(1, 0) == placement_seed(1, 0)
    assert len({placement_seed(1, r) for r in range(20)}) == 20
    assert placement_seed(1, 0) != placement_seed(2, 0)
    assert all(0 <= placement_seed(s, r) < 2**31 for s in (0, 2**31) for r in (0, 999))


def test_port_ranges_are_apart_from_each_other_and_from_every_listener() -> None:
    from traffic.iperf import server_port
    from traffic.workload import make_generator

    assert PLACED_PORTS[-1] < EPHEMERAL[0] and EPHEMERAL[1] == 65535
    jobs = parse_workload(
        [{"kind": "allreduce", "name": f"c{i}"} for i in range(200)]
        + [{"kind": "shortflows", "name": "sf", "senders": ["h0"], "receiver": "h1"}]
        + [{"kind": "rtt_probe", "name": "rtt", "pairs": [["h0", "h1"]]}]
    )
    listeners = [p for i, j in enumerate(jobs) for p in (make_generator(j, i).port, make_generator(j, i).port + 1)]
    listeners += [server_port(i) for i in range(len(jobs))]
    assert max(listeners) < PLACED_PORTS[0]


# --- the scenario's placement key -----------------------------------------------------------------------------------


def test_placement_spec_modes_and_seeds() -> None:
    assert PlacementSpec.from_dict({}, "placement").mode == "per-repeat"
    per, fixed, kern = (PlacementSpec(m) for m in ("per-repeat", "fixed", "kernel"))
    assert per.seed(5, 0) != per.seed(5, 1)
    assert fixed.seed(5, 0) == fixed.seed(5, 3) == per.seed(5, 0)
    assert kern.seed(5, 1) is None
    assert kern.manifest(5, 1) == {"mode": "kernel", "seed": None}
    with pytest.raises(SpecError) as err:
        PlacementSpec.from_dict({"mode": "random"}, "placement")
    assert err.value.path == "placement.mode" and "per-repeat, fixed, kernel" in str(err.value)
    with pytest.raises(SpecError) as err:
        PlacementSpec.from_dict({"seed": 3}, "placement")
    assert err.value.path == "placement.seed"


SCENARIO: dict[str, Any] = {
    "name": "p",
    "fabric": {"topology": "spine-leaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
    "workload": [{"kind": "allreduce", "name": "ar"}],
    "repeat": 3,
    "sweep": {"fabric.host_link.buffer": ["50KB", "200KB"]},
}


def test_variants_share_a_repeats_placement_and_repeats_differ() -> None:
    points = expand(SCENARIO).points
    seeds = {(p.variant, p.repeat_index): p.placement.seed(p.seed, p.repeat_index) for p in points}
    variants = sorted({p.variant for p in points})
    assert len(variants) == 2
    for r in range(3):
        assert seeds[(variants[0], r)] == seeds[(variants[1], r)]
    assert len({seeds[(variants[0], r)] for r in range(3)}) == 3
    assert points[0].raw.get("placement") is None and expand(SCENARIO).base.placement.mode == "per-repeat"


def test_scenario_refuses_an_unknown_mode_and_too_many_flows() -> None:
    with pytest.raises(SpecError, match=r"^placement\.mode: must be one of"):
        expand({**SCENARIO, "placement": {"mode": "spread"}})
    many = {"kind": "shortflows", "name": "sf", "senders": ["l1h1"], "receiver": "l2h1", "count": 20_000}
    with pytest.raises(SpecError) as err:
        expand({**SCENARIO, "workload": [many]})
    assert err.value.path == "placement" and "l1h1 opens 20,000 connections" in str(err.value)
    expand({**SCENARIO, "workload": [many], "placement": {"mode": "kernel"}})  # the kernel's ports: no limit here
    onoff = parse_job({"kind": "iperf", "name": "i", "src": "a", "dst": "b", "duration": 100, "on": 1, "off": 1}, "w")
    check_capacity(PlacementSpec(), [onoff])  # 50 cycles of one stream


# --- what the generators are given ---------------------------------------------------------------------------------


class _Procs:
    """A stand-in ProcessGroup: records what would be spawned."""

    def __init__(self) -> None:
        self.spawned: list[tuple[str, list[str]]] = []

    def spawn(self, name: str, argv: list[str], **kw: Any) -> Any:
        self.spawned.append((name, argv))
        return object()


def _ctx(tmp_path: Path, seed: int | None = 7) -> RunContext:
    return RunContext(HOSTS, _Procs(), tmp_path, ports=SourcePorts(seed=seed))  # type: ignore[arg-type]


def _by_key(ctx: RunContext) -> dict[tuple[str, str, str], int]:
    return {(r["host"], r["job"], r["flow"]): r["sport"] for r in ctx.ports.rows()}


def test_worker_config_carries_every_connections_placed_port(tmp_path: Path) -> None:
    from traffic.ranked import RankedGenerator

    ctx = _ctx(tmp_path)
    ring = RankedGenerator(parse_job({"kind": "allreduce", "name": "ar", "algorithm": "ring"}, "w"), 0)
    cfg = ring.config(ctx)
    placed = _by_key(ctx)
    # a ring over h0..h3: each rank connects to the next higher rank it exchanges with, rank 0 also to rank 3
    assert cfg["sports"] == {
        "0": {"1": placed[("h0", "ar", "0->1/ch0")], "3": placed[("h0", "ar", "0->3/ch0")]},
        "1": {"2": placed[("h1", "ar", "1->2/ch0")]},
        "2": {"3": placed[("h2", "ar", "2->3/ch0")]},
    }
    a2a = RankedGenerator(parse_job({"kind": "alltoall", "name": "a2a", "channels": 2}, "w"), 1).config(ctx)
    n = 4
    assert set(a2a["sports"]["0"]) == {str(p + n * ch) for p in (1, 2, 3) for ch in (0, 1)}
    assert a2a["sports"]["2"][str(3 + n)] == _by_key(ctx)[("h2", "a2a", "2->3/ch1")]
    ports_h0 = [p for (h, _, _), p in _by_key(ctx).items() if h == "h0"]
    assert len(ports_h0) == len(set(ports_h0)) == 2 + 6


def test_kernel_mode_worker_config_binds_nothing(tmp_path: Path) -> None:
    from traffic.ranked import RankedGenerator

    cfg = RankedGenerator(parse_job({"kind": "allreduce", "name": "ar"}, "w"), 0).config(_ctx(tmp_path, None))
    assert all(p == 0 for peers in cfg["sports"].values() for p in peers.values())


def test_iperf3_cycles_each_get_a_block_and_the_loop_passes_it(tmp_path: Path) -> None:
    from traffic.iperf import IperfGenerator

    ctx = _ctx(tmp_path)
    spec = {"kind": "iperf", "name": "bg", "src": "h0", "dst": "h2", "duration": 5, "on": 1, "off": 1, "parallel": 2}
    gen = IperfGenerator(parse_job(spec, "w"), 0)
    gen.cports = gen.client_ports(ctx, "h0")
    placed = _by_key(ctx)
    assert len(gen.cports) == 3  # (5 + 1) // (1 + 1) cycles
    assert gen.cports == [placed[("h0", "bg", f"c{c}.s0")] for c in range(3)]
    assert all(placed[("h0", "bg", f"c{c}.s1")] == gen.cports[c] + 1 for c in range(3))
    argv = gen.loop_argv(ctx)
    assert argv[argv.index("-B") + 1] == "10.0.0.1"
    # run the loop with a stand-in iperf3 that logs its arguments: each cycle's client gets its own --cport
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "iperf3").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/args\n')
    (fake / "iperf3").chmod(0o755)
    assert argv[4:7] == ["3", "1", "1"]  # cycles, on, off
    argv[6] = "0"  # no sleeping between the cycles
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    subprocess.run(argv, check=True, env=env, timeout=20)
    lines = (tmp_path / "args").read_text().splitlines()
    assert [line.split()[line.split().index("--cport") + 1] for line in lines] == [str(p) for p in gen.cports]


def test_iperf3_fixed_cport_is_kept_and_listed(tmp_path: Path) -> None:
    from traffic.iperf import IperfGenerator, fixed_client_ports

    job = parse_job({"kind": "iperf", "name": "bg", "src": "h0", "dst": "h2", "cport": 40000, "parallel": 3}, "w")
    ctx = RunContext(HOSTS, _Procs(), tmp_path, ports=SourcePorts(7, reserved=fixed_client_ports([job])))  # type: ignore[arg-type]
    gen = IperfGenerator(job, 0)
    gen.cports = gen.client_ports(ctx, "h0")
    assert gen.cports == [40000]
    assert [r["sport"] for r in ctx.ports.rows()] == [40000, 40001, 40002]
    argv = gen.loop_argv(ctx)
    assert argv[8] == "40000"  # the loop's ports argument


def test_iperf3_kernel_mode_has_no_cport(tmp_path: Path) -> None:
    from traffic.iperf import IperfGenerator

    ctx = _ctx(tmp_path, None)
    gen = IperfGenerator(parse_job({"kind": "iperf", "name": "bg", "src": "h0", "dst": "h2"}, "w"), 0)
    gen.cports = gen.client_ports(ctx, "h0")
    argv = gen.loop_argv(ctx)
    assert gen.cports == [] and argv[8] == "" and "-B" not in argv


@pytest.mark.parametrize("kind", ["shortflows", "incast"])
def test_short_flows_config_carries_a_port_per_flow(tmp_path: Path, kind: str) -> None:
    from traffic.probes import ShortFlowsGenerator

    ctx = _ctx(tmp_path)
    spec = {"kind": kind, "name": "sf", "senders": ["h0", "h1"], "receiver": "h3", "count": 5}
    gen = ShortFlowsGenerator(parse_job(spec, "w"), 0)
    gen.start(ctx)
    cfg = json.loads((tmp_path / "sf.config.json").read_text())
    placed = _by_key(ctx)
    assert cfg["src_ips"] == ["10.0.0.1", "10.0.0.2"]
    for i, name in enumerate(("h0", "h1")):
        fids = [f[0] for f in cfg["flows"][i]]
        assert cfg["sports"][i] == [placed[(name, "sf", f"f{fid}")] for fid in fids]
        assert len(set(cfg["sports"][i])) == 5  # every flow (each incast round's) its own port
    assert all(argv[:3] == ["/usr/bin/python3", "-m", "traffic.flowtools"] for _, argv in ctx.procs.spawned)  # type: ignore[attr-defined]


def test_scapy_train_config_carries_its_placed_port(tmp_path: Path) -> None:
    pytest.importorskip("scapy.contrib.roce")
    from traffic.scapy_train import ScapyTrainGenerator, build_frames, decode_frame

    ctx = _ctx(tmp_path)
    ScapyTrainGenerator(parse_job({"kind": "scapy_train", "name": "tr", "src": "h0", "dst": "h1"}, "w"), 0).start(ctx)
    cfg = json.loads((tmp_path / "tr.config.json").read_text())
    assert cfg["sport"] == _by_key(ctx)[("h0", "tr", "train")]
    frames = build_frames(
        {**cfg, "trains": 1, "burst": 1, "src_ip": "10.0.0.1"}, "02:00:00:00:00:01", "02:00:00:00:00:02"
    )
    from scapy.layers.inet import UDP
    from scapy.layers.l2 import Ether

    assert Ether(frames[0])[UDP].sport == cfg["sport"] and decode_frame(frames[0])["dport"] == 4791


def test_runs_on_one_built_fabric_never_bind_a_port_twice() -> None:
    """The lab CLI runs jobs on a fabric kept up: a job run again gets new ports (an earlier run's may be in
    TIME_WAIT), while a fabric built for one point starts from the placement's own picks."""
    from testbed.run import source_ports

    class Fab:  # stands for a built Fabric: only its identity matters
        pass

    fab, point = Fab(), expand(SCENARIO).points[0]
    first = source_ports(fab, point)  # type: ignore[arg-type]
    p1 = first.sport("h0", "ar", "0->1/ch0")
    again = source_ports(fab, point)  # type: ignore[arg-type]
    assert again is first and again.sport("h0", "ar", "0->1/ch0") != p1
    assert source_ports(Fab(), point).sport("h0", "ar", "0->1/ch0") == p1  # type: ignore[arg-type]
    other_repeat = expand(SCENARIO).points[1]
    assert source_ports(fab, other_repeat) is not first  # type: ignore[arg-type]


def test_reserve_keeps_later_fixed_ports_out() -> None:
    sp = SourcePorts(seed=4)
    pick = SourcePorts(seed=4).sport("h0", "j", "f")
    sp.reserve({"h0": frozenset({pick})})
    assert sp.sport("h0", "j", "f") != pick
    assert sp.claim("h0", "bg", "c0.s0", pick) == pick
