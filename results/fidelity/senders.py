"""The ``sender_backlog`` guardrail: a backlogged iperf3 sender that ran out of data was short of CPU, not of link.

A link that delivers less than its share because its sender (or that sender's receiver) did not keep up looks
faithful to the bottleneck check, which only judges queues that held packets. senders.csv (``testbed.telemetry.
senders``) has each backlogged sender's TCP_INFO over time. Over each data stream's life in flows.csv, less
``sender_edge_s`` at both ends (slow start's first samples and the last data's drain), a sample is *starved* when
the socket had nothing unsent while its congestion window had room (``notsent_bytes == 0`` and ``unacked <
cwnd``): the link could have taken more and the sender had none to give. (A backlogged iperf3 client keeps
hundreds of KB unsent; the kernel's ``app_limited`` flag is recorded but not used: it belongs to the latest
delivery-rate sample, and stays 0 through the idle gaps of a sender that writes in bursts.) A starved share above
``sender_short_max`` makes the run unfaithful. The kernel's own timers, how much of the time with data in flight
the receive window or the send buffer held the sender, are reported beside it, not judged: a receiver's window
says nothing of the sender's CPU (their values in runs: docs/bench.md, "The sender guardrail").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from results.checks import Rows, Thresholds, as_frame, check
from results.tables import numbers

MIN_SAMPLES = 5  # a stream judged on fewer samples than this is too short to judge


def _stream_spans(flows: pd.DataFrame, edge: float) -> dict[tuple[str, int], tuple[float, float]]:
    sport, t0, t1 = numbers(flows, "sport"), numbers(flows, "t_start"), numbers(flows, "t_end")
    proto = flows["proto"].where(flows["proto"].notna(), "tcp").astype(str) if "proto" in flows else "tcp"
    ok = (proto == "tcp") & sport.notna() & t0.notna() & t1.notna()
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for src, p, a, b in zip(flows["src"][ok].astype(str), sport[ok], t0[ok], t1[ok]):
        spans[(src, int(p))] = (float(a) + edge, float(b) - edge)
    return spans


def _judge_stream(rows: pd.DataFrame) -> dict[str, Any]:
    notsent, unacked, cwnd = numbers(rows, "notsent_bytes"), numbers(rows, "unacked"), numbers(rows, "cwnd")
    starved = int(((notsent == 0) & (unacked < cwnd)).sum())  # NaN compares False: an unknown is not starved

    def delta(col: str) -> float:
        v = numbers(rows, col)
        a, b = v.iloc[0], v.iloc[-1]
        return float(b - a) if not (pd.isna(a) or pd.isna(b)) else 0.0

    busy = delta("busy_us")
    held = delta("rwnd_limited_us") + delta("sndbuf_limited_us")
    return {
        "samples": len(rows),
        "starved_share": round(starved / len(rows), 4),
        "window_held_share": round(held / busy, 4) if busy > 0 else 0.0,
        "rwnd_limited_s": round(delta("rwnd_limited_us") / 1e6, 3),
        "sndbuf_limited_s": round(delta("sndbuf_limited_us") / 1e6, 3),
    }


def _plain(v: Any) -> Any:
    """A cell as the old row reader gave it: an integral float (a column with gaps) back to an int."""
    if isinstance(v, np.generic):
        v = v.item()
    return int(v) if isinstance(v, float) and v.is_integer() else v


def check_senders(senders: Rows, flows: Rows, th: Thresholds = Thresholds(), watched: bool = False) -> dict[str, Any]:
    """``watched``: the run asked for senders.csv (it had backlogged iperf3 senders), so an empty table is an error
    of the harness, not a run without senders."""
    name, limit = "sender_backlog", th.sender_short_max
    fl = as_frame(flows)
    spans = _stream_spans(fl, th.sender_edge_s) if not fl.empty else {}
    sd = as_frame(senders)
    if sd.empty:
        why = "senders.csv is empty: the sampler saw none of the watched sockets" if watched else "no backlogged sender"
        return check(name, False if watched and spans else None, None, limit, why)
    t = numbers(sd, "t")
    sd = sd.assign(_node=sd["node"].astype(str), _sport=numbers(sd, "sport").fillna(0).astype(int), _t=t)
    lo = pd.Series([spans.get(k, (np.nan, np.nan))[0] for k in zip(sd["_node"], sd["_sport"])], index=sd.index)
    hi = pd.Series([spans.get(k, (np.nan, np.nan))[1] for k in zip(sd["_node"], sd["_sport"])], index=sd.index)
    inside = sd[(t >= lo) & (t <= hi)]
    per: dict[str, dict[str, Any]] = {}
    for (node, sport), rows in inside.groupby(["_node", "_sport"], sort=True):
        if len(rows) >= MIN_SAMPLES:
            rows = rows.sort_values("_t", kind="stable")
            per[f"{node}:{sport}->{_plain(rows['dport'].iloc[0])}"] = _judge_stream(rows)
    if not per:
        return check(name, None, None, limit, f"no sender stream had {MIN_SAMPLES} samples inside its own span")
    worst = max(per, key=lambda k: per[k]["starved_share"])
    bad = {k: d for k, d in per.items() if d["starved_share"] > limit}
    if bad:
        parts = [
            f"{k} starved in {d['starved_share']:.0%} of {d['samples']} samples, held by the receive window or send "
            f"buffer {d['window_held_share']:.0%} of its busy time"
            for k, d in sorted(bad.items())
        ]
        reason = (
            f"{len(bad)} of {len(per)} backlogged senders ran short (the machine, not the link, limited them): "
            + "; ".join(parts[:4])
        )
    else:
        w = per[worst]
        reason = (
            f"{len(per)} backlogged senders kept data to send (worst {worst}: starved {w['starved_share']:.1%}, "
            f"window-held {w['window_held_share']:.1%})"
        )
    return check(name, not bad, per[worst]["starved_share"], limit, reason, per)
