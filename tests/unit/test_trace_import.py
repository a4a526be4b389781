"""Trace import: Chakra execution traces written by the package's own writer, ASTRA-sim/SimAI text, the compiled
schedule (it completes, its dependencies hold) and its ideal time; malformed traces get one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.spec.fields import SpecError
from tests.unit.test_traffic_schedule import execute, sizes_match
from traffic import formulas
from traffic.trace_graph import read_astra_text, read_chakra
from traffic.trace_schedule import STRIDE, TraceBuilder

et = pytest.importorskip("chakra.schema.protobuf.et_def_pb2", reason="mlc-chakra is not installed (./setup.sh)")
protolib = pytest.importorskip("chakra.src.third_party.utils.protolib")
MB = 1_000_000
RATE = 1e6  # bytes/s


def _node(nid: int, kind: int, name: str, deps: tuple[int, ...] = (), us: int = 0, **attrs: Any) -> Any:
    n = et.Node(id=nid, name=name, type=kind, duration_micros=us)
    n.data_deps.extend(deps)
    for k, v in attrs.items():
        n.attr.append(
            et.AttributeProto(name=k, string_val=v) if isinstance(v, str) else et.AttributeProto(name=k, int64_val=v)
        )
    return n


def write_chakra(prefix: Path, per_rank: list[list[Any]]) -> None:
    for r, nodes in enumerate(per_rank):
        with open(f"{prefix}.{r}.et", "wb") as fh:
            protolib.encodeMessage(fh, et.GlobalMetadata(version="0.0.4"))
            for n in nodes:
                protolib.encodeMessage(fh, n)


def allreduce_trace(prefix: Path, ranks: int = 4, size: int = MB) -> None:
    """Per rank: 10 ms of compute, then a 1 MB all-reduce over every rank, then 5 ms of compute."""
    write_chakra(
        prefix,
        [
            [
                _node(1, et.COMP_NODE, "fwd", us=10_000),
                _node(2, et.COMM_COLL_NODE, "ar", (1,), comm_type=et.ALL_REDUCE, comm_size=size),
                _node(3, et.COMP_NODE, "opt", (2,), us=5_000),
            ]
            for _ in range(ranks)
        ],
    )


def test_chakra_round_trip_and_ideal(tmp_path: Path) -> None:
    allreduce_trace(tmp_path / "ar")
    graph = read_chakra(tmp_path / "ar", 4, "workload[0].path", {})
    assert [x["kind"] for x in graph["nodes"][0]] == ["comp", "coll", "comp"]
    assert graph["nodes"][2][1] == {"id": 2, "name": "ar", "deps": [1], "kind": "coll", "coll": "allreduce", "size": MB}
    sch, built, ideal = TraceBuilder(graph, 32768, RATE).build()
    execute(sch)
    sizes_match(sch)
    ring = formulas.ideal_time("allreduce", "ring", 4, MB, RATE)
    assert ideal == pytest.approx(0.010 + ring + 0.005)
    coll = [b for b in built if b["kind"] == "coll"]
    assert len(coll) == 1 and coll[0]["ranks"] == [0, 1, 2, 3]
    # every message of the all-reduce carries its node's step range
    steps = {m.step // STRIDE for p in sch.ranks for q in p.sends.values() for m in q}
    assert steps == {coll[0]["seq"]}
    assert all(p.bytes_sent() == pytest.approx(2 * 3 / 4 * MB, abs=4) for p in sch.ranks)


def test_send_recv_groups_and_order(tmp_path: Path) -> None:
    """Rank 0 sends 64 KB to rank 1 after its compute; ranks 0-1 and 2-3 all-gather in process groups; the
    recv's node waits for the data; the compute after it depends on it."""
    nodes = [
        [_node(1, et.COMP_NODE, "c", us=1000), _node(2, et.COMM_SEND_NODE, "s", (1,), comm_dst=1, comm_size=65536),
         _node(3, et.COMM_COLL_NODE, "ag", (2,), comm_type=et.ALL_GATHER, comm_size=MB, pg_name="a")],
        [_node(1, et.COMM_RECV_NODE, "r", comm_src=0, comm_size=65536), _node(2, et.COMP_NODE, "c", (1,), us=1000),
         _node(3, et.COMM_COLL_NODE, "ag", (2,), comm_type=et.ALL_GATHER, comm_size=MB, pg_name="a")],
        [_node(3, et.COMM_COLL_NODE, "ag", comm_type=et.ALL_GATHER, comm_size=MB, pg_name="b")],
        [_node(3, et.COMM_COLL_NODE, "ag", comm_type=et.ALL_GATHER, comm_size=MB, pg_name="b")],
    ]  # fmt: skip
    write_chakra(tmp_path / "t", nodes)
    graph = read_chakra(tmp_path / "t", 4, "w", {"a": (0, 1), "b": (2, 3)})
    sch, built, ideal = TraceBuilder(graph, 32768, RATE).build()
    order = execute(sch)
    sizes_match(sch)
    assert sorted(b["ranks"] for b in built if b["kind"] == "coll") == [[0, 1], [2, 3]]
    # rank 1's compute runs after the 64 KB arrived
    seq = {(b["kind"], tuple(b["ranks"])): b["seq"] for b in built}
    send_at = order.index((0, "send", 1, seq[("send", (0, 1))] * STRIDE))
    comp_at = order.index((1, "compute", -1, seq[("comp", (1,))] * STRIDE))
    assert send_at < comp_at
    assert ideal == pytest.approx(0.001 + 65536 / RATE + 0.001 + formulas.ideal_time("allgather", "ring", 2, MB, RATE))


@pytest.mark.parametrize(
    ("nodes", "groups", "reason"),
    [
        ([_node(1, et.COMM_COLL_NODE, "x", comm_size=5)], {}, "attribute comm_type is missing"),
        ([_node(1, et.COMM_COLL_NODE, "x", comm_type=et.BARRIER, comm_size=5)], {}, "comm_type BARRIER is not"),
        ([_node(1, et.COMM_COLL_NODE, "x", comm_type=0, comm_size=5, pg_name="tp")], {}, "process group 'tp'"),
        ([_node(1, et.COMP_NODE, "x", (7,))], {}, "depends on node 7"),
        ([_node(1, et.COMP_NODE, "x", (2,)), _node(2, et.COMP_NODE, "y", (1,))], {}, "dependency cycle"),
        ([_node(1, et.COMM_SEND_NODE, "x", comm_dst=0, comm_size=5)], {}, "peer 0 is not another"),
    ],
)
def test_malformed_chakra_one_line(tmp_path: Path, nodes: list[Any], groups: dict[str, Any], reason: str) -> None:
    write_chakra(tmp_path / "bad", [nodes, []])
    with pytest.raises(SpecError, match=reason) as exc:
        read_chakra(tmp_path / "bad", 2, "workload[0].path", groups)
    assert str(exc.value).startswith("workload[0].path: ") and "\n" not in str(exc.value)


def test_truncated_and_missing_files(tmp_path: Path) -> None:
    allreduce_trace(tmp_path / "ar", ranks=2)
    with pytest.raises(SpecError, match=r"ar\.2\.et: no such file"):
        read_chakra(tmp_path / "ar", 3, "w", {})
    data = (tmp_path / "ar.1.et").read_bytes()
    (tmp_path / "ar.1.et").write_bytes(data[:-7])
    with pytest.raises(SpecError, match=r"ar\.1\.et: not a Chakra execution trace after 2 nodes"):
        read_chakra(tmp_path / "ar", 2, "w", {})


def test_unmatched_collective_is_refused(tmp_path: Path) -> None:
    write_chakra(tmp_path / "u", [[_node(1, et.COMM_COLL_NODE, "ar", comm_type=0, comm_size=MB)], []])
    graph = read_chakra(tmp_path / "u", 2, "w", {})
    with pytest.raises(SpecError, match="never matched by the other ranks"):
        TraceBuilder(graph, 32768, RATE).build()


ASTRA = """HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 4 checkpoints: 0
2
attn -1 1000 ALLREDUCE 200000 1000 ALLREDUCE 200000 2000 ALLREDUCE 400000 100
mlp -1 3000 NONE 0 3000 NONE 0 6000 ALLREDUCE 800000 100
"""


def test_astra_text_hybrid_groups(tmp_path: Path) -> None:
    """Forward and input-gradient collectives over the model-parallel pairs, weight gradients over the
    data-parallel pairs; times in us here."""
    path = tmp_path / "w.txt"
    path.write_text(ASTRA)
    graph = read_astra_text(path, 4, "w", time_unit="us")
    r1 = graph["nodes"][1]
    colls = {x["name"]: x["group"] for x in r1 if x["kind"] == "coll"}
    assert colls == {"attn.fwd_comm": [0, 1], "attn.ig_comm": [0, 1], "attn.wg_comm": [1, 3], "mlp.wg_comm": [1, 3]}
    assert sum(x["seconds"] for x in r1 if x["kind"] == "comp") == pytest.approx(0.016)
    sch, built, ideal = TraceBuilder(graph, 32768, RATE).build()
    execute(sch)
    sizes_match(sch)
    assert len([b for b in built if b["kind"] == "coll"]) == 2 * 2 + 2 * 2  # fwd+ig per MP pair, 2 wg per DP pair
    assert ideal > 0.016


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("PIPE\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n", "line 1: unknown parallelism 'PIPE'"),
        ("DATA\nx\n", "line 2: expected the layer count"),
        ("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE\n", "line 3: a layer has 12 columns, this one 10"),
        ("DATA\n1\nl -1 1 NONE 0 1 NONE 0 1 SENDRECV 5 1\n", "line 3: unknown communication 'SENDRECV'"),
        ("DATA\n1\nl -1 a NONE 0 1 NONE 0 1 NONE 0 1\n", "line 3: fwd time and size must be numbers"),
        ("DATA\n2\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n", "line 2 says 2 layers, the file has 1"),
        ("HYBRID_TRANSFORMER model_parallel_NPU_group: 3\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n", "does not divide"),
    ],
)
def test_malformed_astra_text_one_line(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "w.txt"
    path.write_text(text)
    with pytest.raises(SpecError, match=reason):
        read_astra_text(path, 4, "workload[0].path")


def _ddp(**kw: Any) -> Any:
    from testbed.spec.workload import parse_job

    return parse_job({"kind": "ddp", "name": "d", "params": 500_000, "layers": 12, "backward": "50ms",
                      "bucket": "512KB", **kw}, "workload[0]")  # fmt: skip


def test_ddp_buckets_overlap_the_backward() -> None:
    """2 MB of fp32 gradients (12 layers of 166,664-166,668 bytes) in 512 KB buckets: a bucket closes at 4 layers,
    so 3 all-reduces, each after the backward of the layer that fills it (overlap) or all after the whole
    backward; in order either way. The ideal shows the overlap."""
    from traffic.ddp import ddp_graph

    g = ddp_graph(_ddp(), 8)
    nodes = g["nodes"][0]
    colls = [x for x in nodes if x["kind"] == "coll"]
    assert [x["size"] for x in colls] == [666_656, 666_672, 666_672]
    by_id = {x["id"]: x for x in nodes}
    assert [by_id[c["deps"][0]]["name"] for c in colls] == ["layer8.bwd", "layer4.bwd", "layer0.bwd"]
    assert all(colls[i]["id"] in colls[i + 1]["deps"] for i in range(2))  # one stream: in order
    compute = 12 * 0.075
    rate = 6.2e6
    _, _, over = TraceBuilder(g, 32768, rate).build()
    _, _, serial = TraceBuilder(ddp_graph(_ddp(overlap=False), 8), 32768, rate).build()
    comm = [formulas.ideal_time("allreduce", "ring", 8, x["size"], rate) for x in colls]
    assert serial == pytest.approx(compute + sum(comm))
    assert over == pytest.approx(compute + comm[-1])  # the others hide under 4 layers' backward (200 ms)
    assert TraceBuilder(g, 32768, float("inf")).build()[2] == pytest.approx(compute)


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"layer_params": [1, 2]}, "give params .* or layer_params"),
        ({"backward": ["1ms", "2ms"]}, "one duration or one per layer \\(12\\), got 2"),
    ],
)
def test_ddp_bad_input(kw: dict[str, Any], reason: str) -> None:
    with pytest.raises(SpecError, match=reason):
        _ddp(**kw)


def test_ddp_hierarchical_buckets() -> None:
    """algorithm: hierarchical all-reduces each bucket by leaf (8 ranks on 4 leaves); the ideal uses its formula."""
    from traffic.ddp import ddp_graph

    leaves = [f"l{i // 2 + 1}" for i in range(8)]
    g = ddp_graph(_ddp(algorithm="hierarchical", overlap=False), 8)
    sch, built, ideal = TraceBuilder(g, 32768, 6.2e6, leaves=leaves).build()
    execute(sch)
    sizes_match(sch)
    sizes = [b["size"] for b in built if b["kind"] == "coll"]
    comm = sum(formulas.ideal_time("allreduce", "hierarchical", 8, s, 6.2e6, leaves) for s in sizes)
    assert ideal == pytest.approx(12 * 0.075 + comm)
    with pytest.raises(SpecError, match="hierarchical is an all-reduce over every rank"):
        TraceBuilder(g, 32768, 6.2e6).build()  # no leaves known


def _scenario(workload: list[dict[str, Any]], **fabric: Any) -> dict[str, Any]:
    fab = {"topology": "spine-leaf", "spines": 1, "leaves": 2, "hosts_per_leaf": 2,
           "host_link": {"rate": "50Mbit", "mtu": 9000}, **fabric}  # fmt: skip
    return {"name": "t", "fabric": fab, "workload": workload, "duration": "60s"}


def test_compute_stretches_with_fabric_scale(tmp_path: Path) -> None:
    """Under fabric.scale the rates are divided by F and trace or DDP compute times multiplied by it."""
    from testbed.spec.scenario import expand
    from traffic.trace_job import job_graph

    path = tmp_path / "w.txt"
    path.write_text("DATA\n1\nl -1 1000 NONE 0 2000 NONE 0 3000 ALLREDUCE 1000 1\n")
    jobs = [{"kind": "trace", "name": "t", "format": "astra_text", "path": str(path), "time_unit": "us"},
            {"kind": "ddp", "name": "d", "params": 1000, "layers": 2, "backward": "10ms"}]  # fmt: skip
    trace, ddp = expand(_scenario(jobs, scale=100)).base.workload
    assert trace.time_scale == ddp.time_scale == 100.0  # type: ignore[union-attr]
    comp = [x["seconds"] for x in job_graph(trace, 4)["nodes"][0] if x["kind"] == "comp"]  # type: ignore[arg-type]
    assert comp == pytest.approx([0.1, 0.3, 0.2])  # fwd, wg, ig: x 100
    assert [x["seconds"] for x in job_graph(ddp, 4)["nodes"][0][:2]] == pytest.approx([0.5, 0.5])  # type: ignore[arg-type]


def test_preflight_refuses_a_malformed_trace_in_one_line(tmp_path: Path) -> None:
    from testbed.plan import bounds
    from testbed.spec.scenario import expand
    from testbed.spec.topology import Topology

    path = tmp_path / "w.txt"
    path.write_text("DATA\n1\nl -1 1000 NONE 0 2000 NONE 0 3000 ALLREDUCE\n")
    point = expand(_scenario([{"kind": "trace", "name": "t", "format": "astra_text", "path": str(path)}])).base
    with pytest.raises(SpecError) as exc:
        bounds.check_time(point.workload, Topology(point.fabric), point.duration_s)
    assert str(exc.value) == f"workload[0].path: {path}: line 3: a layer has 12 columns, this one 10"


def test_a_chain_of_collectives_keeps_dependencies_short() -> None:
    """60 buckets all-reduced one after another: a message waits on one token per key (the highest count), not on
    every earlier collective's tokens."""
    from traffic.ddp import ddp_graph

    g = ddp_graph(_ddp(layers=60, params=60_000, bucket="1B", backward="1ms"), 4)
    sch, _, _ = TraceBuilder(g, 32768, RATE).build()
    execute(sch)
    longest = max(len(m.deps) for p in sch.ranks for q in p.sends.values() for m in q)
    assert longest <= 2 * 4 + 2, longest  # per peer a receive count and a sent count, plus compute
