"""The trace kind's part of the rank-based generator (traffic.ranked): its config and its per-node table.

``trace_config`` loads the job's trace for its ranks (traffic.trace_graph), compiles it once here to get the ideal
time and the node of every step range (traffic.trace_schedule; each worker compiles the same graph again), and
returns what the config carries. ``trace_ops`` folds the workers' step records into one row per traced node, rank
and iteration: trace_ops.csv, whose ``node_id`` and ``name`` are the trace's own.
"""

from __future__ import annotations

from typing import Any

from testbed.spec.workload import DdpJob, StepJob, TraceJob
from traffic.ddp import ddp_graph
from traffic.trace_graph import load_trace
from traffic.trace_schedule import STRIDE, TraceBuilder


def job_graph(spec: StepJob, ranks: int) -> dict[str, Any]:
    """The step a trace or DDP job replays, over ``ranks`` ranks."""
    if isinstance(spec, TraceJob):
        return load_trace(spec, ranks)
    assert isinstance(spec, DdpJob)
    return ddp_graph(spec, ranks)


def trace_config(spec: StepJob, leaves: list[str], rate_Bps: float) -> dict[str, Any]:
    """What the workers and ``parse`` need: the graph, its nodes as built, its ideal time at the link rate and its
    compute alone (the ideal with communication free: what the exposed communication is measured against)."""
    graph = job_graph(spec, len(leaves))
    _, built, ideal = TraceBuilder(graph, spec.slice, rate_Bps, leaves=leaves).build()
    compute = TraceBuilder(graph, spec.slice, float("inf"), leaves=leaves).build()[2]
    size = sum(int(b.get("size", 0)) for b in built if b["kind"] in ("coll", "send"))
    algorithm = spec.algorithm if isinstance(spec, DdpJob) else "trace"
    return {"algorithm": algorithm, "trace": graph, "trace_nodes": built, "ideal_s": ideal, "compute_s": compute,
            "size": size, "slice": spec.slice}  # fmt: skip


def trace_ops(job: str, cfg: dict[str, Any], names: list[str], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (iteration, rank, node): first start and last end of the node's sends, receives and compute
    at that rank, and the bytes it sent there."""
    nodes = cfg["trace_nodes"]
    acc: dict[tuple[int, int, int], dict[str, Any]] = {}
    for s in steps:
        seq = int(s["step"]) // STRIDE
        key = (int(s["iter"]), int(s["rank"]), seq)
        row = acc.get(key)
        if row is None:
            node = nodes[seq]
            row = acc[key] = {
                "job": job,
                "iter": s["iter"],
                "warmup": int(s["warmup"]),
                "rank": names[int(s["rank"])],
                "node_id": node["id"],
                "name": node["name"],
                "kind": node["kind"],
                "coll": node.get("coll", ""),
                "size": node.get("size", 0),
                "group": len(node["ranks"]),
                "t_start": s["t_start"],
                "t_end": s["t_end"],
                "bytes_sent": 0,
            }
        row["t_start"], row["t_end"] = min(row["t_start"], s["t_start"]), max(row["t_end"], s["t_end"])
        if s["op"] == "send":
            row["bytes_sent"] += int(s["bytes"])
    return sorted(acc.values(), key=lambda r: (r["iter"], r["t_start"]))
