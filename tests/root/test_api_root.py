"""The Python API's root half (testbed.api, docs/api.md): a fabric built from a scenario, jobs run on it twice, and a
two-point sweep read back as one DataFrame (root)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.root.hoststate import procs_in_other_netns

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (builds namespaces)"),
]


def scenario(**extra: Any) -> dict[str, Any]:
    """Two hosts on two leaves under one spine at 20 Mbit/s: one short iperf flow and an RTT probe."""
    return {
        "name": "api-root",
        "fabric": {
            "topology": "spine-leaf",
            "spines": 1,
            "leaves": 2,
            "hosts_per_leaf": 1,
            "host_link": {"rate": "20Mbit", "buffer": "100KB", "mtu": 9000},
        },
        "workload": [
            {"kind": "iperf", "name": "bulk", "src": "l1h1", "dst": "l2h1", "duration": 2},
            {"kind": "rtt_probe", "name": "rtt", "pairs": [["l2h1", "l1h1"]], "interval": "20ms", "duration": 2},
        ],
        "duration": "20s",
        "telemetry": {"queue_hz": 100},
        **extra,
    }


def test_jobs_run_twice_on_one_fabric_and_leave_nothing(tmp_path: Path) -> None:
    from testbed import api

    before = procs_in_other_netns()
    point = api.load_scenario(scenario())
    with api.make_fabric(point, lock_wait=600) as fab:
        first = api.run_jobs(fab, point, out=tmp_path)
        second = api.run_jobs(fab, point, jobs=["bulk"], out=tmp_path)
    assert first.path != second.path  # a record is never overwritten
    for run in (first, second):
        assert run.manifest["status"] == "complete", run.manifest.get("error")
        assert run.summary["goodput_bps"] > 0.5 * 20e6 * 0.9  # one flow on a 20 Mbit/s path, well over half of it
    assert {r["job"] for r in first.rows("flows")} >= {"bulk"}
    assert first.rows("rtt"), "the RTT probe recorded nothing"
    assert not second.rows("rtt"), "jobs=['bulk'] ran the probe too"
    assert procs_in_other_netns() == before, "the fabric left processes in its namespaces"


def test_run_sweep_returns_a_row_per_point_with_the_swept_key(tmp_path: Path) -> None:
    from testbed import api

    sweep = {"fabric.host_link.buffer": ["50KB", "200KB"]}
    frame = api.run_sweep(scenario(sweep=sweep), out=tmp_path, lock_wait=600)
    assert len(frame) == 2
    assert set(frame["status"]) == {"complete"}
    assert "fabric.host_link.buffer" in frame.attrs["swept_keys"]
    assert sorted(frame["fabric.host_link.buffer"]) == ["200KB", "50KB"]
    assert (frame["goodput_bps"] > 0).all()
