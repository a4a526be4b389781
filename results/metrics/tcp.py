"""TCP counters of one run: each host namespace's /proc/net/netstat and /proc/net/snmp counters, end less start
(netstat.csv), added up over the hosts (see results.metrics).

Retransmissions by kind (the kernel's counters, net/ipv4/tcp_output.c, tcp_timer.c, tcp_input.c):

- ``retrans_total``: Tcp.RetransSegs, every segment handed to a retransmission, counted before it is sent.
- ``retrans_fast_total``: TCPFastRetrans, segments retransmitted as lost (SACK, RACK, duplicate ACKs) while not
  in the Loss state: fast retransmits.
- ``retrans_rto_total``: TCPTimeouts + TCPSlowStartRetrans: each retransmission timer expiry (data, SYN or FIN)
  resends the first unacknowledged segment, then the rest of the lost window goes out in the Loss state.
- ``retrans_tlp_total``: TCPLossProbes, tail-loss probes sent. A probe resends the last segment, or sends a new one
  when the window allows; only the first kind is a retransmission.
- ``retrans_failed_total``: TCPRetransFail, retransmissions that never left the host (the sender's own queue or
  memory refused them); RetransSegs counts them too.
- ``retrans_spurious_total``: TCPDSACKRecvSegs, segments the receivers reported by D-SACK as arriving twice,
  beyond what the sender had retransmitted ignored: retransmissions that were not needed (of any kind above).

The kinds need not add up to RetransSegs: a probe of new data is a TLP but no retransmission, a failed
retransmission is in RetransSegs and TCPRetransFail but not in the fast or slow-start count, a timer expiry whose
resend fails is counted by TCPTimeouts all the same, SYN-ACK resends are in RetransSegs only, and spurious ones
are also fast, RTO or TLP ones.
"""

from __future__ import annotations

from collections import defaultdict

from results.record import Run
from results.summary import Summary
from results.tables import numbers, reason

COUNTERS = {  # metric -> the netstat counters it adds up (end - start, over hosts), any that the record has
    "retrans_total": ("Tcp.RetransSegs",),
    "timeouts_total": ("TcpExt.TCPTimeouts",),
    "ce_delivered_total": ("TcpExt.TCPDeliveredCE",),
    "ce_received_pkts_total": ("IpExt.InCEPkts",),
    # reordering TCP detected (by SACK, timestamps, or Reno's dupacks), and D-SACKs: spurious retransmissions
    "reorder_total": ("TcpExt.TCPSACKReorder", "TcpExt.TCPTSReorder", "TcpExt.TCPRenoReorder"),
    "dsack_total": ("TcpExt.TCPDSACKRecv",),
}
KINDS = {  # retransmissions by kind (the module's docstring): metric -> (counters it adds, every one needed; what)
    "retrans_fast_total": (("TcpExt.TCPFastRetrans",), "fast retransmits"),
    "retrans_rto_total": (("TcpExt.TCPTimeouts", "TcpExt.TCPSlowStartRetrans"), "RTO expiries and Loss-state resends"),
    "retrans_tlp_total": (("TcpExt.TCPLossProbes",), "tail-loss probes"),
    "retrans_failed_total": (("TcpExt.TCPRetransFail",), "retransmissions that never left the host"),
    "retrans_spurious_total": (("TcpExt.TCPDSACKRecvSegs",), "D-SACKed segments: spurious retransmissions"),
}


def _deltas(run: Run) -> dict[str, dict[str, float]]:
    """host -> counter -> end - start, for the counters with both phases."""
    table = run.table("netstat")
    vals: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    counted = table.assign(value=numbers(table, "value"))
    counted = counted[counted["value"].notna()]
    for host, counter, phase, value in zip(
        counted["host"].astype(str), counted["counter"].astype(str), counted["phase"].astype(str), counted["value"]
    ):
        vals[(host, counter)][phase] = float(value)
    deltas: dict[str, dict[str, float]] = defaultdict(dict)
    for (host, counter), ph in vals.items():
        if "start" in ph and "end" in ph:
            deltas[host][counter] = ph["end"] - ph["start"]
    return dict(sorted(deltas.items()))


def netstat(run: Run, s: Summary) -> None:
    deltas = _deltas(run)
    table = run.table("netstat")
    if deltas:
        s.put("tcp_per_host", deltas)
    for metric, counters in COUNTERS.items():
        have = [d[c] for d in deltas.values() for c in counters if c in d]
        if have:
            s.put(metric, sum(have))
        elif table.empty:
            s.na(metric, f"no TCP counters: {reason(table)}")
        else:
            s.na(metric, f"netstat.csv has no start and end value of {' or '.join(counters)}")
    for metric, (counters, what) in KINDS.items():
        missing = [c for c in counters if not any(c in d for d in deltas.values())]
        if table.empty:
            s.na(metric, f"no TCP counters: {reason(table)}")
        elif missing:
            s.na(metric, f"{what}: netstat.csv has no start and end value of {' and '.join(missing)}")
        else:
            s.put(metric, sum(d.get(c, 0.0) for d in deltas.values() for c in counters))
