"""A Chakra execution trace replayed on the fabric, as root: a 4-rank, 1 MB all-reduce (one node per rank's trace,
written with mlc-chakra's own writer) runs within 1.1 x the ideal ring time, and trace_ops.csv names the node."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.root.hoststate import run_one

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc)")]
pytest.importorskip("chakra.schema.protobuf.et_def_pb2", reason="mlc-chakra is not installed (./setup.sh)")
SCENARIO = """\
name: trace-allreduce
description: a 4-rank Chakra all-reduce trace of 1 MB (tests/root/test_trace_replay.py)
fabric:
  topology: spine-leaf
  spines: 1
  leaves: 2
  hosts_per_leaf: 2
  host_link: {rate: 50Mbit, buffer: 300KB, mtu: 9000}
workload:
  - {kind: trace, name: step, format: chakra, path: ar, ranks: all, iterations: 5, warmup: 1}
duration: 60s
telemetry: {queue_hz: 250}
"""


def test_chakra_allreduce_near_the_ideal_ring(tmp_path: Path) -> None:
    from tests.unit.test_trace_import import _node, et, write_chakra

    write_chakra(
        tmp_path / "ar", [[_node(7, et.COMM_COLL_NODE, "grad_ar", comm_type=et.ALL_REDUCE, comm_size=1_000_000)]] * 4
    )
    (tmp_path / "trace.yaml").write_text(SCENARIO)
    run = run_one(tmp_path / "trace.yaml", tmp_path / "runs")
    summary = json.loads((run / "summary.json").read_text())
    print("measured / ideal", summary["measured_over_ideal"], "iterations", summary["coll_iters_n"])
    assert summary["coll_iters_n"] == 5
    assert summary["measured_over_ideal"] <= 1.1
    ops = (run / "trace_ops.csv").read_text().splitlines()
    head = ops[0].split(",")
    rows = [dict(zip(head, line.split(","), strict=True)) for line in ops[1:]]
    assert {r["node_id"] for r in rows} == {"7"} and {r["name"] for r in rows} == {"grad_ar"}
    assert len(rows) == 6 * 4  # every iteration (warm-up included) at every rank
    assert all(int(r["bytes_sent"]) == 1_500_000 for r in rows)  # 2(n-1)/n x 1 MB from every rank
