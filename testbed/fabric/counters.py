"""What the fabric's own counters hold at a run's end, as the record's rows (``read_counters``): the flowlet
programs' counters, each traffic class's queue (classes.csv), the eBPF markers' marks (marks.csv), and each flow's
bytes per spine or core (path_bytes.csv, matched to the flows once the workload's tables are parsed:
``path_bytes``). Plain data: the run writes it into its record."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from testbed.fabric import pathbytes
from testbed.fabric.build import Fabric

PathCounts = dict[str, dict[pathbytes.Key, pathbytes.Counted]]
Row = dict[str, Any]


@dataclass(frozen=True)
class Counters:
    """A built fabric's counters at one moment. ``flowlets``: node -> its flowlet program's counters (None unless
    flowlet or adaptive routing); ``classes``: classes.csv rows; ``marks``: marks.csv rows (None when no port has
    the eBPF marker); ``paths``: each top-tier router's bytes per 5-tuple, for ``path_bytes`` (None when nothing
    counted them)."""

    flowlets: dict[str, dict[str, int]] | None
    classes: list[Row]
    marks: list[Row] | None
    paths: PathCounts | None


def read_counters(fab: Fabric) -> Counters:
    """Every counter of the built fabric now. Call before it is torn down."""
    flowlets = fab.read_flowlets()
    classes = fab.read_classes()
    bpf_marks = fab.read_marks()
    marks = None if bpf_marks is None else mark_rows(bpf_marks)
    return Counters(flowlets, classes, marks, fab.read_path_bytes())


def mark_rows(counted: Mapping[tuple[str, str], Mapping[str, int]]) -> list[Row]:
    """marks.csv rows of the eBPF markers' counters per (namespace, device): the node is the namespace's name
    after the run's prefix."""
    return [
        {
            "node": ns.split("-", 1)[1],
            "dev": dev,
            "impl": "bpf",
            "marks": c.get("marks"),
            "ect_seen": c.get("ect_seen"),
        }
        for (ns, dev), c in counted.items()
    ]


def path_bytes(
    fab: Fabric, counted: PathCounts | None, flows: Iterable[Mapping[str, Any]]
) -> tuple[list[Row] | None, Row]:
    """path_bytes.csv's rows (each flow's bytes per top-tier router; None when nothing was counted) and the
    manifest's ``path_bytes`` entry (its status, and the summary when counted)."""
    if counted is None:
        why = (
            "telemetry.path_bytes is false"
            if not fab.path_bytes
            else "this machine lacks nftables (apt install nftables)"
        )
        return None, {"status": f"not counted: {why}"}
    hosts = fab.hosts
    rows, summary = pathbytes.per_flow(counted, flows, lambda h: hosts[h].ip if h in hosts else h)
    return rows, {"status": "counted", **summary}
