"""TCP counters of one run: each host namespace's /proc/net/netstat and /proc/net/snmp counters, end less start
(netstat.csv), added up over the hosts (see results.metrics).
"""

from __future__ import annotations

from collections import defaultdict

from results.record import Run
from results.summary import Summary
from results.tables import numbers, reason

COUNTERS = {  # metric -> the netstat counters it adds up (end - start, over hosts)
    "retrans_total": ("Tcp.RetransSegs",),
    "timeouts_total": ("TcpExt.TCPTimeouts",),
    "ce_delivered_total": ("TcpExt.TCPDeliveredCE",),
    "ce_received_pkts_total": ("IpExt.InCEPkts",),
    # reordering TCP detected (by SACK, timestamps, or Reno's dupacks), and D-SACKs: spurious retransmissions
    "reorder_total": ("TcpExt.TCPSACKReorder", "TcpExt.TCPTSReorder", "TcpExt.TCPRenoReorder"),
    "dsack_total": ("TcpExt.TCPDSACKRecv",),
}


def netstat(run: Run, s: Summary) -> None:
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
    if deltas:
        s.put("tcp_per_host", dict(sorted(deltas.items())))
    for metric, counters in COUNTERS.items():
        have = [d[c] for d in deltas.values() for c in counters if c in d]
        if have:
            s.put(metric, sum(have))
        elif table.empty:
            s.na(metric, f"no TCP counters: {reason(table)}")
        else:
            s.na(metric, f"netstat.csv has no start and end value of {' or '.join(counters)}")
