"""What the fabric's own counters hold at a run's end, into the record: the flowlet programs' counters, each
traffic class's queue (classes.csv), the eBPF markers' marks (marks.csv), and each flow's bytes per spine
(path_bytes.csv, matched to the flows once the workload's tables are parsed)."""

from __future__ import annotations

from typing import Any

from results.record import RunRecord
from testbed.fabric import pathbytes
from testbed.fabric.build import Fabric

PathCounts = dict[str, dict[pathbytes.Key, pathbytes.Counted]]


def record_counters(record: RunRecord, fab: Fabric) -> PathCounts | None:
    """Read every counter of the built fabric into the record; the path counters come back for
    ``record_path_bytes`` (their flows are not parsed yet). Call before the fabric is torn down."""
    flowlets = fab.read_flowlets()
    if flowlets is not None:
        record.set("flowlets", flowlets)
    rows = fab.read_classes()
    if rows:
        record.table("classes").write_many(rows)
    bpf_marks = fab.read_marks()
    if bpf_marks is not None:
        record.table("marks").write_many(
            {
                "node": ns.split("-", 1)[1],
                "dev": dev,
                "impl": "bpf",
                "marks": c.get("marks"),
                "ect_seen": c.get("ect_seen"),
            }
            for (ns, dev), c in bpf_marks.items()
        )
    return fab.read_path_bytes()


def record_path_bytes(record: RunRecord, fab: Fabric, counted: PathCounts | None, flows: list[dict[str, Any]]) -> None:
    """Each flow's bytes per top-tier router (path_bytes.csv), and the manifest's ``path_bytes`` summary."""
    if counted is None:
        why = (
            "telemetry.path_bytes is false"
            if not fab.path_bytes
            else "this machine lacks nftables (apt install nftables)"
        )
        record.set("path_bytes", {"status": f"not counted: {why}"})
        return
    hosts = fab.hosts
    rows, summary = pathbytes.per_flow(counted, flows, lambda h: hosts[h].ip if h in hosts else h)
    record.table("path_bytes").write_many(rows)
    record.set("path_bytes", {"status": "counted", **summary})
