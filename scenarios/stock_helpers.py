"""Helpers of the stock-kernel scenarios (marker ``stock_kernel``): the precise native skip, steady-state queue
statistics of one egress queue, DCTCP's queue model, and where the cross-check's BPF reference records are."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scenario_helpers import port_rows

from testbed.host.capabilities import Capabilities

GUEST_COMMAND = "python3 -m testbed vm -- /usr/bin/python3 -m pytest -p no:cacheprovider -m stock_kernel scenarios"
BOTTLENECK = "l1:l1-l1h1"  # every stock scenario sends into l1h1


def require_stock_kernel(*needs: str) -> Capabilities:
    """Skip (with what is missing and how to run it) unless this kernel has kernel RED / netem / tcp_dctcp."""
    from testbed.fabric.probe import probe
    from testbed.host.capabilities import stock_missing

    caps = probe()
    lacking = stock_missing(caps)
    missing = [n for n in lacking if not needs or n in needs]
    if missing:
        pytest.skip(
            f"this kernel ({caps.kernel}) lacks {', '.join(missing)}: the stock-kernel scenarios run in the "
            f"guest kernel mode: {GUEST_COMMAND}"
        )
    return caps


def steady_backlog(point: Any, queue: str = BOTTLENECK, skip: float = 0.2) -> np.ndarray:
    """Time-weighted backlog samples (bytes, one per ms) of ``queue`` over the traffic window, the first ``skip``
    share (slow start) left out. queues.csv holds a value until the next row (rows on change + keyframes)."""
    rows = port_rows(point.frame("queues"), queue)
    t = np.array([r["t"] for r in rows], float)
    b = np.array([r["backlog_bytes"] or 0 for r in rows], float)
    lo, hi = point.manifest["traffic_window"]
    busy = t[b > 0]  # the flows' own span inside the window (iperf starts and ends inside it)
    if busy.size:
        lo, hi = max(lo, float(busy[0])), min(hi, float(busy[-1]))
    lo += skip * (hi - lo)
    grid = np.arange(lo, hi, 1e-3)
    idx = np.searchsorted(t, grid, side="right") - 1
    return np.where(idx >= 0, b[np.clip(idx, 0, None)], 0.0)


def queue_stats(point: Any, queue: str = BOTTLENECK) -> dict[str, float]:
    s = steady_backlog(point, queue)
    q = point.queue(queue)
    return {
        "median": float(np.median(s)),
        "p99": float(np.percentile(s, 99)),
        "p99_rows": float(q["backlog_p99_bytes"]),
        "drops": float(q["drops"] or 0),
        "marks": float(q["marks"] or 0),
    }


@dataclass(frozen=True)
class DctcpSawtooth:
    """DCTCP's steady-state queue (Alizadeh et al., SIGCOMM 2010, section 3.3), in frames: N synchronized flows
    share C x RTT + K, each cuts by alpha / 2 with alpha = sqrt(2 / W*), so the queue swings by ``amplitude``
    A = sqrt(2 N (C x RTT + K)) / 2 below its peak K + N and bottoms at ``q_min`` = K + N - A. The rule
    K > C x RTT / 7 is q_min > 0 solved for K. Below it the queue is empty while the window climbs back the last
    -q_min frames at N frames per RTT, out of a cycle of A / N RTTs: ``empty_share`` = -q_min / A."""

    amplitude: float
    q_min: float

    @classmethod
    def of(cls, rate_bps: float, rtt_s: float, k_bytes: float, frame_bytes: float, flows: float) -> DctcpSawtooth:
        bdp = rate_bps / 8 * rtt_s / frame_bytes
        k = k_bytes / frame_bytes
        amplitude = math.sqrt(2 * flows * (bdp + k)) / 2
        return cls(amplitude, k + flows - amplitude)

    @property
    def empty_share(self) -> float:
        return max(0.0, -self.q_min) / self.amplitude


def latest_reference(runs: Path, scenario_name: str, impl: str) -> Path | None:
    """The newest complete, faithful record of ``scenario_name`` whose marking used ``impl`` (under ``runs``)."""
    found = []
    for m in runs.glob("*/*/*/manifest.json"):
        try:
            man = json.loads(m.read_text())
        except (OSError, ValueError):
            continue
        if (
            man.get("scenario_name") == scenario_name
            and man.get("status") == "complete"
            and (man.get("fidelity") or {}).get("faithful") is True
            and (man.get("marking") or {}).get("impls") == [impl]
        ):
            found.append((man.get("started_at", ""), m.parent))
    return max(found)[1] if found else None


def _without_impl(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _without_impl(v) for k, v in obj.items() if k != "impl"}
    if isinstance(obj, list):
        return [_without_impl(v) for v in obj]
    return obj


def same_setting(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two manifests ran the same fabric and workload, up to the marking implementation (kernel RED vs eBPF)."""
    keys = ("fabric", "workload", "telemetry")
    return all(_without_impl(a["scenario"].get(k)) == _without_impl(b["scenario"].get(k)) for k in keys)
