"""ECN marking vs drop-tail, and DCTCP vs cubic with ECN.

Reproduces two published results:
- ECN vs drop-tail under incast (Alizadeh et al., "Data Center TCP", SIGCOMM 2010, sections 2 and 4):
  step marking at K keeps the switch queue short, so incast bursts fit in the buffer: drops and retransmission
  timeouts go away, the completion-time tail of short messages shrinks and the incast is over sooner, while the
  long transfers keep their goodput.
  What it does to the all-reduce sharing the incast's port is a trade, not a win: outside the incast the
  iterations take about their ideal time in both. Under drop-tail the incast lasts longer and slows the several
  iterations it overlaps a little; with ECN it is over sooner, but the iteration it overlaps most is slower, as
  marking gives the ring's flow into l1h1 a fair share of the port next to the incast senders where drop-tail's
  full queue let it keep more. So the test does not assert the iteration p99: it was below drop-tail's only when
  that slowed iteration fell on the warmup.
- DCTCP's central result (same paper, figure 1 and section 3): DCTCP holds the bottleneck queue near the marking
  threshold K at full throughput, while classic ECN (cubic cutting by 0.3 on a marked window) holds it lower, below K.

The BPF struct_ops DCTCP used on kernels without tcp_dctcp has a known bug: once in a while one sender starts with a
garbage ssthresh, and its slow-start burst overflows the buffer once per run. The DCTCP test therefore asserts on the
median (and quartiles) of the queue and on goodput, not on zero drops.

``TESTBED_REVERSED=1`` runs the same tests with the setting reversed (ECN forced off in both points; cubic in place
of DCTCP) to show that the assertions fail then.
"""

from __future__ import annotations

import pytest
from scenario_helpers import (
    REVERSED,
    backlog_percentiles,
    drop_tail,
    host_k_bytes,
    marks_received_gap,
    payload_bps,
)

from results.stats import percentiles

pytestmark = [pytest.mark.root, pytest.mark.quick]

REVERSED_OVERRIDES = {
    "ecn": {"sweep": {"fabric.host_link.ecn": ["off", "off"]}},  # drop-tail at both points
    "dctcp": {"sweep": {"fabric.transport.cc": ["cubic", "cubic"]}},  # cubic + ECN at both points
}
PORT = "l1:l1-l1h1"  # the incast receiver's last hop
CLEAN_ITER_MAX = 1.15  # iterations the incast does not overlap, over the ideal time (runs: docs/bench.md)
INCAST_SPAN_MAX = 0.7  # the incast's span with ECN over drop-tail's (runs: docs/bench.md)


def incast_overlap(p) -> tuple[float, list[float], list[float], float]:
    """(incast span s, durations of the iterations (warmup too) it overlapped, of the measured ones it did not,
    ideal iteration s)."""
    fct = [r for r in p.table("fct") if r["job"] == "incast"]
    a, b = min(float(r["t_start"]) for r in fct), max(float(r["t_end"]) for r in fct)
    contended, clean = [], []
    for r in p.table("iterations"):
        t0, t1 = float(r["t_start"]), float(r["t_end"])
        if t0 < b and t1 > a:
            contended.append(t1 - t0)
        elif not int(r["warmup"]):
            clean.append(t1 - t0)
    return b - a, contended, clean, float(p.table("iterations")[0]["ideal_s"])


def slowest_short_message(p) -> float:
    """The longest completion time of the incast's short messages. Their 80 cannot support a p99 (it needs 100, so
    the summary has none); over 80 values a p99 would be interpolated between the two slowest anyway."""
    done = [r for r in p.table("fct") if r["job"] == "incast" and r["t_end"] not in (None, "")]
    return max(float(r["t_end"]) - float(r["t_start"]) for r in done)


def _drop_tail_and_ecn(exp):
    """(drop-tail, ECN). REVERSED runs drop-tail at both: the second in sweep order stands in for ECN."""
    if REVERSED:
        off, on = exp.matching(ecn=drop_tail)
        return off, on
    return exp.where(ecn=drop_tail), exp.where_not(ecn=drop_tail)


def test_ecn_removes_drops_and_cuts_the_tails(judged):
    judged("ecn", judge_ecn, REVERSED_OVERRIDES)


def judge_ecn(exp):
    off, on = _drop_tail_and_ecn(exp)
    k = on.param("fabric.host_link.marking.k")
    q_off = backlog_percentiles(off.path, PORT, [50, 99])
    q_on = backlog_percentiles(on.path, PORT, [50, 99])
    for label, p, q in (("drop-tail", off, q_off), (f"ECN K={k}", on, q_on)):
        print(
            f"{label}: drops {p['drops_total']:.0f} marks {p['marks_total']:.0f} timeouts {p['timeouts_total']:.0f} "
            f"retrans {p['retrans_total']:.0f} slowest short message {slowest_short_message(p) * 1e3:.0f} ms "
            f"slowest iteration {p['coll_iter_max_s'] * 1e3:.0f} ms busbw {p['busbw_bps'] / 1e6:.1f} Mbit/s "
            f"queue {PORT} p50 {q[0] / 1e3:.0f} KB p99 {q[1] / 1e3:.0f} KB"
        )
    exp.expect(on["marks_total"] > 0, f"no CE marks with K={k} (marks {on['marks_total']})")
    marks, ce_in, marked_drops = marks_received_gap(on)
    exp.expect(
        0 <= marks - ce_in <= marked_drops,
        f"marks_total {marks:.0f} against the receivers' {ce_in:.0f} CE packets (IpExt.InCEPkts): the gap is not "
        f"within the marking ports' {marked_drops:.0f} drops",
    )
    exp.expect(
        q_on[1] < 0.8 * q_off[1],
        f"queue p99 at {PORT} with ECN {q_on[1] / 1e3:.0f} KB not below 0.8 x drop-tail's {q_off[1] / 1e3:.0f} KB",
    )
    exp.expect(
        on["drops_total"] <= 0.2 * off["drops_total"],
        f"drops with ECN {on['drops_total']:.0f} not at most 0.2 x drop-tail's {off['drops_total']:.0f}",
    )
    exp.expect(
        on["timeouts_total"] <= max(1, 0.5 * off["timeouts_total"]),
        f"timeouts with ECN {on['timeouts_total']:.0f} not at most max(1, half of drop-tail's "
        f"{off['timeouts_total']:.0f})",
    )
    slow_on, slow_off = slowest_short_message(on), slowest_short_message(off)
    exp.expect(
        slow_on < 0.7 * slow_off,
        f"slowest short message with ECN {slow_on * 1e3:.0f} ms not below 0.7 x drop-tail's {slow_off * 1e3:.0f} ms",
    )
    span = {}
    for label, p in (("drop-tail", off), ("ECN", on)):
        span[label], contended, clean, ideal = incast_overlap(p)
        p99 = percentiles(clean, [99])[0] if clean else float("nan")
        print(
            f"{label}: incast over {span[label]:.2f} s; iterations it overlapped {[round(t, 2) for t in contended]} s; "
            f"the others' p99 {p99:.3f} s (ideal {ideal:.3f} s, {len(clean)} measured)"
        )
        exp.expect(len(clean) >= 3, f"{label}: only {len(clean)} measured iterations outside the incast")
        exp.expect(
            p99 <= CLEAN_ITER_MAX * ideal,
            f"{label}: all-reduce iterations outside the incast, p99 {p99:.3f} s, above {CLEAN_ITER_MAX} x the ideal "
            f"{ideal:.3f} s",
        )
    exp.expect(
        span["ECN"] < INCAST_SPAN_MAX * span["drop-tail"],
        f"the incast took {span['ECN']:.2f} s with ECN, not below {INCAST_SPAN_MAX} x drop-tail's "
        f"{span['drop-tail']:.2f} s",
    )
    exp.expect(
        on["busbw_bps"] > 0.95 * off["busbw_bps"],
        f"all-reduce busbw with ECN {on['busbw_bps'] / 1e6:.1f} Mbit/s fell below 0.95 x drop-tail's "
        f"{off['busbw_bps'] / 1e6:.1f} Mbit/s",
    )


def _bpf_dctcp() -> bool:
    import os

    if os.geteuid() != 0:
        return False
    from testbed.fabric.probe import probe

    return probe().ecn.dctcp == "bpf"


@pytest.mark.xfail(
    condition=_bpf_dctcp() and not REVERSED,  # reversed (cubic at both points), it must fail, and say so
    strict=False,
    reason="known bug of the BPF struct_ops DCTCP on this 6.18 kernel (kernels without tcp_dctcp): a sender sometimes "
    "sits in CWR with an ssthresh our programs did not set, and the cwnd growth that follows can hold the queue above "
    "2K for most of a run (repaired per ACK, narrowed not removed: see tests/root/test_ecn_marker.py); kernel DCTCP is "
    "checked strictly in the stock-kernel scenarios",
)
def test_dctcp_holds_the_queue_near_k(judged):
    judged("dctcp", judge_dctcp, REVERSED_OVERRIDES)


def judge_dctcp(exp):
    if REVERSED:  # cubic at both points: the first in sweep order stands in for DCTCP
        dctcp, cubic = exp.matching(cc="cubic")
    else:
        dctcp, cubic = exp.where(cc="dctcp"), exp.where(cc="cubic")
    payload = payload_bps(dctcp.param("fabric.host_link"))
    k = host_k_bytes(dctcp)
    q = {}
    for label, p in (("dctcp", dctcp), ("cubic+ECN", cubic)):
        q[label] = backlog_percentiles(p.path, PORT, [10, 25, 50, 75, 90])
        print(
            f"{label} ({p.variant}): queue {PORT} p10/p25/p50/p75/p90 "
            f"{'/'.join(f'{x / 1e3:.0f}' for x in q[label])} KB; goodput {p['goodput_bps'] / 1e6:.1f} Mbit/s "
            f"({p['goodput_bps'] / payload:.3f} of payload rate); drops {p['drops_total']:.0f} marks {p['marks_total']:.0f}"
        )
    _, d25, d50, _, _ = q["dctcp"]
    _, c25, c50, _, _ = q["cubic+ECN"]
    exp.expect(
        k / 2 <= d50 <= 2 * k,
        f"DCTCP's median queue {d50 / 1e3:.1f} KB is not near K = {k / 1e3:.0f} KB (expected {k / 2e3:.0f}-{2 * k / 1e3:.0f} KB)",
    )
    exp.expect(
        dctcp["goodput_bps"] > 0.95 * payload,
        f"DCTCP goodput {dctcp['goodput_bps'] / 1e6:.1f} Mbit/s below 0.95 x the payload rate {payload / 1e6:.1f}",
    )
    exp.expect(
        d50 > c50 + 4_000 and d25 > c25 + 3_000,
        f"DCTCP's queue median/p25 {d50 / 1e3:.1f}/{d25 / 1e3:.1f} KB not above cubic+ECN's {c50 / 1e3:.1f}/"
        f"{c25 / 1e3:.1f} KB by 4/3 KB (cubic's 0.3 cuts should hold the queue lower, below K)",
    )
