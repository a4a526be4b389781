"""The ``sender_backlog`` guardrail: a backlogged iperf3 sender that ran out of data was short of CPU, not of link.

A link that delivers less than its share because its sender (or that sender's receiver) did not keep up looks
faithful to the bottleneck check, which only judges queues that held packets. senders.csv (``testbed.telemetry.
senders``) has each backlogged sender's TCP_INFO over time. Over each data stream's life in flows.csv, less
``sender_edge_s`` at both ends (slow start's first samples and the last data's drain), a sample is *starved* when
the socket had nothing unsent while its congestion window had room (``notsent_bytes == 0`` and ``unacked <
cwnd``): the link could have taken more and the sender had none to give. (A backlogged iperf3 client keeps
550-600 KB unsent here; the kernel's ``app_limited`` flag is recorded but not used: it belongs to the latest
delivery-rate sample, and stays 0 through the idle gaps of a sender that writes in bursts.) A starved share above
``sender_short_max`` makes the run unfaithful. The kernel's own timers, how much of the time with data in flight
the receive window or the send buffer held the sender, are reported beside it, not judged: natively they stay at
0-0.2 %, in the TCG guest at 0-1.5 % and once at 7 % (a receiver window, in one of 12 buffer-sizing streams), which
says nothing of the sender's CPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from results.checks import Row, Thresholds, check, number

MIN_SAMPLES = 5  # a stream judged on fewer samples than this is too short to judge


def _stream_spans(flows: Iterable[Row], edge: float) -> dict[tuple[str, int], tuple[float, float]]:
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for f in flows:
        sport, t0, t1 = number(f.get("sport")), number(f.get("t_start")), number(f.get("t_end"))
        if str(f.get("proto") or "tcp") != "tcp" or sport is None or t0 is None or t1 is None:
            continue
        spans[(str(f.get("src")), int(sport))] = (t0 + edge, t1 - edge)
    return spans


def _starved(r: Row) -> bool:
    notsent, unacked, cwnd = number(r.get("notsent_bytes")), number(r.get("unacked")), number(r.get("cwnd"))
    return notsent == 0 and unacked is not None and cwnd is not None and unacked < cwnd


def _judge_stream(rows: list[Row]) -> dict[str, Any]:
    starved = sum(1 for r in rows if _starved(r))

    def delta(col: str) -> float:
        a, b = number(rows[0].get(col)), number(rows[-1].get(col))
        return (b - a) if a is not None and b is not None else 0.0

    busy = delta("busy_us")
    held = delta("rwnd_limited_us") + delta("sndbuf_limited_us")
    return {
        "samples": len(rows),
        "starved_share": round(starved / len(rows), 4),
        "window_held_share": round(held / busy, 4) if busy > 0 else 0.0,
        "rwnd_limited_s": round(delta("rwnd_limited_us") / 1e6, 3),
        "sndbuf_limited_s": round(delta("sndbuf_limited_us") / 1e6, 3),
    }


def check_senders(
    senders: Iterable[Row], flows: Iterable[Row], th: Thresholds = Thresholds(), watched: bool = False
) -> dict[str, Any]:
    """``watched``: the run asked for senders.csv (it had backlogged iperf3 senders), so an empty table is an error
    of the harness, not a run without senders."""
    name, limit = "sender_backlog", th.sender_short_max
    spans = _stream_spans(flows, th.sender_edge_s)
    by: dict[tuple[str, int], list[Row]] = defaultdict(list)
    n_rows = 0
    for r in senders:
        n_rows += 1
        sport, t = number(r.get("sport")), number(r.get("t"))
        key = (str(r.get("node")), int(sport or 0))
        span = spans.get(key)
        if span is not None and t is not None and span[0] <= t <= span[1]:
            by[key].append(r)
    if n_rows == 0:
        why = "senders.csv is empty: the sampler saw none of the watched sockets" if watched else "no backlogged sender"
        return check(name, False if watched and spans else None, None, limit, why)
    per: dict[str, dict[str, Any]] = {}
    for (node, sport), rows in sorted(by.items()):
        if len(rows) >= MIN_SAMPLES:
            rows.sort(key=lambda r: number(r.get("t")) or 0.0)
            per[f"{node}:{sport}->{rows[0].get('dport')}"] = _judge_stream(rows)
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
