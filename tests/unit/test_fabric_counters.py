"""The fabric's counters and snapshots as plain data (testbed.fabric.counters, testbed.fabric.snapshot), and the
record files the run writes from them: the same names, columns and manifest keys as before the move."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from results.record import RunRecord
from testbed import run as run_mod
from testbed.fabric.counters import mark_rows, path_bytes, read_counters
from testbed.fabric.pathbytes import Counted
from testbed.fabric.snapshot import parse_sysctl
from testbed.spec.topology import HostInfo

CLASS_ROW = {
    "node": "l1", "dev": "l1-l1h1", "class": "rdma", "dscp": "26", "priority": "", "weight": 1, "tx_bytes": 900,
    "tx_pkts": 3, "drops": 0, "marks": 1, "backlog_bytes": 0,
}  # fmt: skip
FLOW = {"job": "a", "flow_id": "c0.s0", "src": "l1h1", "dst": "l2h1", "proto": "tcp", "sport": 40000, "dport": 5201}


def fabric(path_bytes: bool = True, marks: bool = True, counted: bool = True) -> Any:
    """A built fabric as the counters read it: its read_* methods answer canned counters."""
    paths = {"s1": {("10.1.1.2", "10.2.1.2", "tcp", 40000, 5201): Counted(15000, 10)}} if counted else None
    return SimpleNamespace(
        read_flowlets=lambda: {"l1": {"flowlets": 4}},
        read_classes=lambda: [CLASS_ROW],
        read_marks=lambda: {("tbabcd-l1", "l1-l1h1"): {"marks": 3, "ect_seen": 10}} if marks else None,
        read_path_bytes=lambda: paths,
        path_bytes=path_bytes,
        hosts={"l1h1": HostInfo("l1h1", "10.1.1.2", "l1"), "l2h1": HostInfo("l2h1", "10.2.1.2", "l2")},
    )


def test_marks_become_rows_named_by_the_node_after_the_run_prefix() -> None:
    assert mark_rows({("tbabcd-p1e1", "p1e1-p1e1h1"): {"marks": 2}}) == [
        {"node": "p1e1", "dev": "p1e1-p1e1h1", "impl": "bpf", "marks": 2, "ect_seen": None}
    ]


def test_path_bytes_rows_and_entry_or_why_not_counted() -> None:
    rows, entry = path_bytes(fabric(), fabric().read_path_bytes(), [FLOW])
    assert rows == [{"job": "a", "flow_id": "c0.s0", "node": "s1", "bytes": 15000, "pkts": 10}]
    assert entry["status"] == "counted" and entry["flows_seen"] == 1 and entry["unmatched_bytes"] == 0
    off = {"status": "not counted: telemetry.path_bytes is false"}
    assert path_bytes(fabric(path_bytes=False), None, [FLOW]) == (None, off)
    no_nft = {"status": "not counted: this machine lacks nftables (apt install nftables)"}
    assert path_bytes(fabric(), None, []) == (None, no_nft)


def test_sysctl_output_parsed_key_by_key() -> None:
    text = "net.ipv4.tcp_ecn = 1\nsysctl: cannot stat /proc/sys/x\nnet.ipv4.ip_local_port_range = 32768\t60999\n"
    assert parse_sysctl(text) == {"net.ipv4.tcp_ecn": "1", "net.ipv4.ip_local_port_range": "32768\t60999"}


def test_the_run_writes_the_counters_into_the_same_files_and_keys(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "m")
    fab = fabric()
    counters = read_counters(fab)
    run_mod._record_counters(rec, counters)
    rows, entry = path_bytes(fab, counters.paths, [FLOW])
    assert rows is not None
    rec.table("path_bytes").write_many(rows)
    rec.set("path_bytes", entry)
    rec.flush()
    assert (rec.path / "marks.csv").read_text() == "node,dev,impl,marks,ect_seen\nl1,l1-l1h1,bpf,3,10\n"
    assert (rec.path / "classes.csv").read_text().splitlines() == [
        "node,dev,class,dscp,priority,weight,tx_bytes,tx_pkts,drops,marks,backlog_bytes",
        "l1,l1-l1h1,rdma,26,,1,900,3,0,1,0",
    ]
    assert (rec.path / "path_bytes.csv").read_text() == "job,flow_id,node,bytes,pkts\na,c0.s0,s1,15000,10\n"
    manifest = json.loads((rec.path / "manifest.json").read_text())
    assert manifest["flowlets"] == {"l1": {"flowlets": 4}} and manifest["path_bytes"]["status"] == "counted"


def test_a_fabric_without_marker_classes_or_flowlets_writes_none_of_their_files(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "m")
    bare = SimpleNamespace(
        read_flowlets=lambda: None, read_classes=lambda: [], read_marks=lambda: None, read_path_bytes=lambda: None
    )
    run_mod._record_counters(rec, read_counters(bare))  # type: ignore[arg-type]
    rec.flush()
    assert not (rec.path / "marks.csv").exists() and not (rec.path / "classes.csv").exists()
    assert "flowlets" not in json.loads((rec.path / "manifest.json").read_text())
