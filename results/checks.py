"""What every fidelity guardrail shares: the thresholds, one check's shape, and the verdict over all checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

import pandas as pd

Row = Mapping[str, Any]
# a table as the guardrails take it: a DataFrame (a record's, as read) or row dicts (a test's)
Rows = Union[pd.DataFrame, Iterable[Row]]


@dataclass(frozen=True)
class Thresholds:
    # delivered / configured rate on a busy port, over the time its queue held packets: a queue that empties for a
    # moment is offered less, not emulated short (docs/bench.md, "The fidelity thresholds")
    rate_min: float = 0.95
    # a port busy for less than this is judged against rate_min_short: one 0.2 s window is a few hundred frames,
    # and HTB's bucket and the sample timing move it by several percent (docs/bench.md, "The fidelity thresholds")
    short_busy_s: float = 0.5
    rate_min_short: float = 0.85
    busy_share: float = 0.9  # share of a window a queue must be non-empty for the window to count as busy
    window_s: float = 0.2
    hold_max_s: float = 0.01  # rows further apart than this: busy only for the drain time of the backlog seen
    cpu_busy: float = 0.95  # a core this busy is saturated
    cpu_share_max: float = 0.10  # share of samples with every core saturated
    sampler_rate_min: float = 0.9  # achieved / target sampling rate
    # one stall of 57 ms was seen at the start of a faithful run (the previous run's namespaces being freed hold
    # the rtnl lock the sampler's dumps need); 0.1 s still catches a sampler that falls behind
    sampler_gap_max_s: float = 0.1
    keyframe_s: float = 0.1  # the sampler writes a row at least this often per queue
    # share of non-empty queue samples allowed to average more than a frame per packet: a stray 2-segment skb
    # (seen once in 60,000 samples of a host queue, gso_max_segs 1) does not make the queue figures meaningless
    gso_share_max: float = 0.001
    # sender_backlog (results/fidelity/senders.py): share of a backlogged sender's samples with nothing to send, or
    # of its busy time held by the receive window / send buffer; the first and last sender_edge_s are not judged
    sender_short_max: float = 0.05
    sender_edge_s: float = 0.5
    # dequeue_gap (results/fidelity/gaps.py, with telemetry.bpf_queues): share of a busy port's dequeue gaps late by
    # a frame time or more, judged at ports with at least gap_min_n gaps
    gap_late_share_max: float = 0.01
    gap_min_n: int = 1000
    # slow_iterations (results/fidelity/stalls.py): an iteration this many times its job's median needs a cause
    slow_iter_factor: float = 1.5
    # stalls: a sampler gap or a CPU's stall (cpu_stalls.csv) covering this share of a flow's stall makes it the
    # machine's
    stall_gap_share: float = 0.5


def as_frame(rows: Rows) -> pd.DataFrame:
    """A table as columns: a DataFrame as it is, a list of row dicts (a test's, a sampler's) made into one."""
    if isinstance(rows, pd.DataFrame):
        return rows
    return pd.DataFrame.from_records(list(rows))


def check(name: str, ok: bool | None, value: Any, threshold: Any, reason: str, details: Any = None) -> dict[str, Any]:
    out = {"name": name, "ok": ok, "value": value, "threshold": threshold, "reason": reason}
    if details is not None:
        out["details"] = details
    return out


def waive(c: dict[str, Any], by: str) -> None:
    """Keep a failed check, recorded and reported, as a warning: ``by`` (another check's name) showed that what it
    guards against did not happen (packets left on time although the CPU was saturated)."""
    c["waived_by"] = by


def verdict(checks: list[dict[str, Any]]) -> dict[str, Any]:
    failing = [c for c in checks if c["ok"] is False and not c.get("waived_by")]
    warnings = [
        f"{c['name']}: {c['reason']} (a warning: {c['waived_by']} passed)"
        for c in checks
        if c["ok"] is False and c.get("waived_by")
    ]
    faithful = not failing
    return {
        "faithful": faithful,
        "status": "faithful" if faithful else "not faithful",
        "failed": [f"{c['name']}: {c['reason']}" for c in failing],
        **({"warnings": warnings} if warnings else {}),
        "checks": checks,
    }
