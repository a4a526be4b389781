"""The direct fidelity check (Mininet-HiFi's: Handigol et al., CoNEXT 2012): did packets leave on time?

At a busy port every dequeue should follow the one before by the ideal transmission time of the packet that left
first (len x 8 / rate). The kernel queue telemetry (``telemetry.bpf_queues``, testbed/bpf/src/qtelem.bpf.c) counts,
per port, the deviation of each such gap in log2-microsecond buckets, early and late apart, over the run (manifest
``qtelem_health``: ``gap_n``, ``gap_hist``). Early dequeues are HTB's bucket letting a frame out at once; a late
one is a frame the emulator sent later than the link would have: the machine, not the link, set the pace.

``check_dequeue_gaps`` judges the share of gaps late by at least one frame time at each port with enough gaps. The
kernel counts those exactly (``gap_late``, against ``gap_late_us``, the port's frame time); a record from before
that count is judged from the histogram, whose buckets are powers of two, at the bucket edge at or below a frame
time (``late_edge``): never less than the share late by a whole frame.

A late gap that a machine stall explains is not the emulator's pace: while a vCPU is stopped nothing forwards, and
the ``machine_stalls`` guardrail (results/fidelity/machine.py) judges what such a stall can move. The kernel also
counts each slot's late gaps (qslots.csv ``late``), so a late gap in a slot that overlaps a stall the canary saw
(within one slot either side) is set apart as the stall's (``late_in_stalls``), and the check judges the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from results.checks import Rows, Thresholds, as_frame, check
from results.fidelity.machine import StallEvent
from results.tables import numbers
from testbed.spec.link import ETH_HEADER

HALF = 16  # gap_hist: HALF early buckets, then HALF late ones; bucket b holds deviations in [2^(b-1), 2^b) us


def late_edge(frame_us: float) -> tuple[int, float]:
    """(first late bucket counted, its lower edge in us): the largest power-of-two edge at or below ``frame_us``."""
    b = max(1, min(HALF - 1, int(math.floor(math.log2(max(frame_us, 1.0)))) + 1))
    return b, float(2 ** (b - 1))


def upper_edge_us(b: int) -> float:
    """Bucket ``b``'s upper edge (the last bucket is open: infinity)."""
    return math.inf if b >= HALF - 1 else float(2**b)


def quantile_edge(hist: list[int], q: float) -> float:
    """The upper edge of the bucket that holds quantile ``q`` of ``hist`` (a bound on that quantile, in us)."""
    n = sum(hist)
    if n == 0:
        return 0.0
    seen = 0
    for b, c in enumerate(hist):
        seen += c
        if seen >= q * n:
            return upper_edge_us(b)
    return math.inf


def late_in_stalls(qslots: Rows, stalls: Sequence[StallEvent], slot_s: float) -> dict[str, int]:
    """Per port (``node:dev``), the late gaps the kernel counted in slots that overlap a machine stall, within one
    slot either side (a gap ends at the first dequeue after the CPU ran again)."""
    df = as_frame(qslots)
    if df.empty or not stalls or "late" not in df or slot_s <= 0:
        return {}
    t, late = numbers(df, "t").to_numpy(dtype=float), numbers(df, "late").fillna(0).to_numpy(dtype=float)
    hit = np.zeros(len(df), dtype=bool)
    for e in stalls:
        hit |= (t + slot_s > e.t_start - slot_s) & (t < e.t_end + slot_s)
    keys = (df["node"].astype(str) + ":" + df["dev"].astype(str)).to_numpy()
    out: dict[str, int] = {}
    for key, n in zip(keys[hit & (late > 0)], late[hit & (late > 0)], strict=True):
        out[key] = out.get(key, 0) + int(n)
    return out


def port_gaps(stats: Mapping[str, Any], rate_bps: float, mtu: int, in_stalls: int = 0) -> dict[str, Any] | None:
    """One port's spread of dequeue deviations, None when the telemetry counted no gap there. ``in_stalls``: late
    gaps a machine stall explains (exact counts only), left out of ``late_share``."""
    hist = [int(x) for x in stats.get("gap_hist") or []]
    n = int(stats.get("gap_n") or 0)
    if n == 0 or len(hist) != 2 * HALF or rate_bps <= 0:
        return None
    early, late = hist[:HALF], hist[HALF:]
    frame_us = (mtu + ETH_HEADER) * 8 / rate_bps * 1e6
    exact = stats.get("gap_late") is not None and float(stats.get("gap_late_us") or 0) > 0
    if exact:  # counted in the kernel against the port's own frame time
        edge, late_n = float(stats["gap_late_us"]), int(stats["gap_late"])
        in_stalls = min(in_stalls, late_n)
    else:  # an older record: from the histogram, at the power-of-two edge at or below a frame time
        first, edge = late_edge(frame_us)
        late_n, in_stalls = sum(late[first:]), 0
    return {
        "gaps": n,
        "frame_us": round(frame_us, 1),
        "late_edge_us": round(edge, 1),
        "late_exact": exact,
        "late_share": (late_n - in_stalls) / n,
        "late_in_stalls": in_stalls,
        "early_share": sum(early) / n,
        "late_p50_us_at_most": quantile_edge(late, 0.5),
        "late_p99_us_at_most": quantile_edge(late, 0.99),
        "mean_abs_us": stats.get("gap_mean_abs_us"),
    }


def check_dequeue_gaps(
    qtelem_health: Mapping[str, Any] | None,
    ports: list[Mapping[str, Any]],
    th: Thresholds = Thresholds(),
    qslots: Rows = (),
    stalls: Sequence[StallEvent] = (),
) -> dict[str, Any]:
    """``dequeue_gap``: at every port with at least ``th.gap_min_n`` gaps, the share late by a frame time (or the
    bucket edge below it), less those in slots of ``qslots`` that overlap one of the machine's ``stalls``, at most
    ``th.gap_late_share_max``. None (not judged) without the kernel telemetry."""
    name = "dequeue_gap"
    if not qtelem_health or not qtelem_health.get("ports"):
        return check(name, None, None, th.gap_late_share_max, "no kernel queue telemetry (telemetry.bpf_queues)")
    by_name = {f"{p['node']}:{p['dev']}": p for p in ports}
    explained = late_in_stalls(qslots, stalls, float(qtelem_health.get("slot_us") or 0) / 1e6)
    per: dict[str, dict[str, Any]] = {}
    for key, stats in (qtelem_health.get("ports") or {}).items():
        port = by_name.get(key)
        if port is None:
            continue
        rate, mtu = float(port.get("rate_bps") or 0), int(port.get("mtu") or 1500)
        spread = port_gaps(stats, rate, mtu, explained.get(key, 0))
        if spread is not None:
            per[key] = spread
    judged = {k: v for k, v in per.items() if v["gaps"] >= th.gap_min_n}
    if not judged:
        most = max((v["gaps"] for v in per.values()), default=0)
        return check(
            name,
            None,
            None,
            th.gap_late_share_max,
            f"no port stayed busy for {th.gap_min_n} dequeues (most {most})",
            per,
        )
    worst = max(judged, key=lambda k: judged[k]["late_share"])
    w = judged[worst]
    ok = w["late_share"] <= th.gap_late_share_max
    reason = (
        f"{len(judged)} busy ports, {sum(v['gaps'] for v in judged.values())} gaps; worst {worst}: "
        f"{w['late_share']:.2%} of {w['gaps']} gaps late by >= {w['late_edge_us']:.0f} us (frame {w['frame_us']:.0f} us; "
        f"limit {th.gap_late_share_max:.0%})"
    )
    stalled = sum(v["late_in_stalls"] for v in judged.values())
    if stalled:
        reason += f"; {stalled} late gaps during machine stalls set apart (machine_stalls judges those)"
    if not ok:
        reason += ": packets left later than the link would have sent them"
    return check(name, ok, w["late_share"], th.gap_late_share_max, reason, per)
