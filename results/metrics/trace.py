"""The slowest collective of a replayed trace or DDP step, and the queue it waited behind most (see results.metrics).

From trace_ops.csv (one row per measured iteration, rank and node): a collective instance lasts from its first
rank's start to its last rank's end; the slowest is the longest. The queue it waited behind: among the egress ports
its traffic can cross in a leaf-spine fabric (its ranks' host ports, every port of their leaves, and the ports
towards those leaves), the one with the largest backlog while it ran, from the kernel telemetry's slots
(``backlog_max``) where the run has them, else from the poller's samples (``backlog_bytes``). In a fat-tree the
aggregation and core ports between pods are not among them.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from results.record import Run
from results.summary import Summary
from results.tables import numbers


def _slowest(ops: pd.DataFrame) -> dict[str, Any] | None:
    coll = ops[(ops["kind"].astype(str) == "coll") & (numbers(ops, "warmup").fillna(0) == 0)]
    if coll.empty:
        return None
    keys = ["job", "iter", "node_id"]
    span = coll.groupby(keys).agg(t_start=("t_start", "min"), t_end=("t_end", "max"), name=("name", "first"),
                                  hosts=("rank", lambda r: sorted(set(map(str, r)))))  # fmt: skip
    span["seconds"] = span["t_end"] - span["t_start"]
    top = span.sort_values("seconds").iloc[-1]
    job, it, node = top.name
    return {"job": str(job), "iter": int(it), "node_id": int(node), "name": str(top["name"]),
            "seconds": float(top["seconds"]), "t_start": float(top["t_start"]), "t_end": float(top["t_end"]),
            "hosts": list(top["hosts"])}  # fmt: skip


def _candidate_ports(run: Run, hosts: list[str]) -> set[tuple[str, str]]:
    ports = (run.manifest.get("fabric") or {}).get("ports") or []
    leaves = {p["peer"] for p in ports if p.get("node") in hosts}
    return {
        (p["node"], p["dev"])
        for p in ports
        if p.get("node") in hosts or p.get("node") in leaves or p.get("peer") in leaves or p.get("peer") in hosts
    }


def _hottest(run: Run, ports: set[tuple[str, str]], t0: float, t1: float) -> tuple[str, float, str] | None:
    for table, col in (("qslots", "backlog_max"), ("queues", "backlog_bytes")):
        q = run.table(table)
        if q.empty or col not in q:
            continue
        t, port = numbers(q, "t"), q["node"].astype(str) + ":" + q["dev"].astype(str)
        keep = (t >= t0) & (t <= t1) & port.isin({f"{n}:{d}" for n, d in ports})
        if not keep.any():
            continue
        peak = numbers(q, col)[keep].groupby(port[keep]).max().sort_values()
        return str(peak.index[-1]), float(peak.iloc[-1]), "bpf" if table == "qslots" else "poller"
    return None


def slowest_collective(run: Run, s: Summary) -> None:
    """``slowest_collective`` where the run replayed a trace or a DDP step (nothing otherwise)."""
    ops = run.table("trace_ops")
    if ops.empty:
        return
    top = _slowest(ops)
    if top is None:
        s.na("slowest_collective", "no measured collective in trace_ops.csv")
        return
    hot = _hottest(run, _candidate_ports(run, top["hosts"]), top["t_start"], top["t_end"])
    if hot is not None:
        top.update(queue=hot[0], queue_backlog_max_bytes=hot[1], queue_source=hot[2])
    s.put("slowest_collective", top)
