"""Per-queue summary figures from the kernel queue telemetry (qslots.csv), read as the poller's are.

The poller's backlog p99 is time-weighted: each queues.csv row counts for the time until its port's next row
(``results.timeweighted``). The kernel's table has a row only for a slot with an event in it, so the same figure is
rebuilt at slot resolution: a slot with events counts once at its highest backlog (``backlog_max``), and every slot
until the port's next event holds the backlog its last event left (``backlog_last``); before a port's first event
its queue was empty. The slots weighed are the telemetry's span, from the first to the last slot with an event on
any port (the poller's figure is weighed inside the manifest's traffic window instead). Drops and marks are sums of
the per-slot counts, which the kernel keeps exactly (tc's own counters agree, tests/root/test_qtelem.py);
``tx_bytes`` is the bytes dequeued. Overlimits are tc's alone: the tracepoints do not see them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

PERCENTILE = 99.0


def held_percentile(slot: np.ndarray, peak: np.ndarray, last: np.ndarray, span: tuple[int, int], q: float) -> float:
    """The ``q``th percentile over every slot of ``span`` (first, last slot number, inclusive) of a port whose event
    slots are ``slot`` (ascending) with their highest and last backlog; see the module's text."""
    lo, hi = span
    nxt = np.append(slot[1:], hi + 1)
    values = np.concatenate([peak, last, [0.0]])
    weights = np.concatenate([np.ones(len(slot)), np.maximum(nxt - slot - 1, 0), [max(int(slot[0]) - lo, 0)]])
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    k = int(np.searchsorted(cum, q / 100.0 * cum[-1], "left"))
    return float(values[order][min(k, len(order) - 1)])


def per_port(qslots: pd.DataFrame, slot_s: float, ports: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """``node:dev`` -> the figures the poller's rows give (samples are the port's slots with events); each of
    ``ports`` (the ports the kernel counted) without a row gets zeros: its queue never held a packet."""
    idle = {"samples": 0, "drops": 0.0, "marks": 0.0, "overlimits": None, "tx_bytes": 0.0}
    zeros = {p: {**idle, "backlog_max_bytes": 0.0, "backlog_p99_bytes": 0.0} for p in ports}
    if qslots.empty:
        return zeros
    slot_no = np.rint(qslots["t"].to_numpy(dtype=float) / slot_s).astype(np.int64)
    span = (int(slot_no.min()), int(slot_no.max()))
    out: dict[str, dict[str, Any]] = dict(zeros)
    frame = qslots.assign(_slot=slot_no).sort_values(["node", "dev", "_slot"], kind="stable")
    for (node, dev), rows in frame.groupby(["node", "dev"], sort=True):
        s = rows["_slot"].to_numpy()
        peak = rows["backlog_max"].to_numpy(dtype=float)
        last = rows["backlog_last"].to_numpy(dtype=float)
        out[f"{node}:{dev}"] = {
            "samples": len(rows),
            "drops": float(rows["drops"].sum()),
            "marks": float(rows["marks"].sum()),
            "overlimits": None,
            "tx_bytes": float(rows["deq_bytes"].sum()),
            "backlog_max_bytes": float(peak.max()),
            "backlog_p99_bytes": held_percentile(s, peak, last, span, PERCENTILE),
        }
    return dict(sorted(out.items()))
