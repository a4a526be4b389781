"""The record's CSV tables: each table's columns and description, and which columns hold text.

The samplers (``testbed.telemetry``), the generators (``traffic``) and the record (``results.tables``) all read
their columns here; docs/record-format.md describes every column. ``TEXT`` names the columns read as text (names,
addresses, kinds); every other column of a schema table is a number (booleans are 0/1).
"""

from __future__ import annotations

SCHEMAS: dict[str, tuple[tuple[str, ...], str]] = {
    "queues": (
        (
            "t",
            "node",
            "dev",
            "backlog_bytes",
            "backlog_pkts",
            "drops",
            "marks",
            "overlimits",
            "tx_bytes",
            "tx_pkts",
            "requeues",
        ),
        "egress queue samples; counters cumulative as read from the kernel; one row per queue per sample",
    ),
    "qslots": (
        (
            "t",
            "node",
            "dev",
            "backlog_max",
            "backlog_min",
            "backlog_last",
            "qlen_max",
            "enq_pkts",
            "enq_bytes",
            "deq_pkts",
            "deq_bytes",
            "drops",
            "marks",
            "soj_n",
            *(f"soj_b{b}" for b in range(16)),
        ),
        "kernel queue telemetry (telemetry.bpf_queues): one row per port and time slot with any event in it",
    ),
    "links": (
        ("t", "node", "dev", "tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "tx_drops"),
        "interface counters over time (cumulative)",
    ),
    "cpu": (("t", "cpu", "busy"), "CPU busy fraction 0..1 over the last interval; cpu = all or the core number"),
    "senders": (
        (
            "t",
            "node",
            "sport",
            "dport",
            "app_limited",
            "notsent_bytes",
            "unacked",
            "cwnd",
            "bytes_acked",
            "busy_us",
            "rwnd_limited_us",
            "sndbuf_limited_us",
        ),
        "TCP_INFO of the backlogged iperf3 senders' sockets over time (sock_diag); timers cumulative",
    ),
    "netstat": (("host", "phase", "counter", "value"), "/proc/net/netstat and snmp counters per host at start/end"),
    "iterations": (
        (
            "job",
            "kind",
            "algorithm",
            "iter",
            "warmup",
            "t_start",
            "t_end",
            "size_bytes",
            "ranks",
            "ideal_s",
            "busbw_factor",
        ),
        "one row per collective iteration",
    ),
    "steps": (("job", "iter", "rank", "step", "op", "peer", "t_start", "t_end", "bytes"), "collective steps per rank"),
    "flows": (
        (
            "job",
            "flow_id",
            "src",
            "dst",
            "proto",
            "sport",
            "dport",
            "bytes",
            "t_start",
            "t_end",
            "goodput_bps",
            "retrans",
            "path",
        ),
        "one row per transport flow",
    ),
    "flow_samples": (("job", "flow_id", "t", "bytes", "cwnd", "rtt_us", "retrans"), "TCP_INFO samples per flow"),
    "fct": (("job", "flow_id", "src", "dst", "size_bytes", "t_start", "t_end", "size_class"), "flow completion times"),
    "rtt": (("job", "src", "dst", "seq", "t_send", "rtt_s"), "latency probe samples (rtt_s empty when lost)"),
    "pipeline": (
        ("job", "iter", "stage", "microbatch", "phase", "op", "peer", "t_start", "t_end", "bytes"),
        "pipeline-parallel schedule events",
    ),
    "worker_cpu": (("job", "rank", "host", "cpu_s", "wall_s"), "CPU seconds each traffic worker used"),
    "trains": (
        ("job", "train", "t_start", "t_end", "sent", "received", "ce", "ect", "out_of_order"),
        "scapy packet trains: what was sent and what arrived",
    ),
    "marks": (("node", "dev", "impl", "marks", "ect_seen"), "ECN marker counters at the end of the run"),
    "events": (("t", "kind", "detail"), "lifecycle events"),
}

# Columns read as text whatever they hold: "0" in cpu.csv's cpu column is a core's name, not the number 0. Any
# other column is typed by what it holds (a rank may be a number or a host's name), as ``results.tables`` reads it.
TEXT: dict[str, frozenset[str]] = {
    "queues": frozenset({"node", "dev"}),
    "qslots": frozenset({"node", "dev"}),
    "links": frozenset({"node", "dev"}),
    "cpu": frozenset({"cpu"}),
    "senders": frozenset({"node"}),
    "netstat": frozenset({"host", "phase", "counter"}),
    "iterations": frozenset({"job", "kind", "algorithm"}),
    "steps": frozenset({"job", "op"}),
    "flows": frozenset({"job", "src", "dst", "proto", "path"}),
    "flow_samples": frozenset({"job"}),
    "fct": frozenset({"job", "src", "dst", "size_class"}),
    "rtt": frozenset({"job", "src", "dst"}),
    "pipeline": frozenset({"job", "phase", "op", "peer"}),
    "worker_cpu": frozenset({"job", "host"}),
    "trains": frozenset({"job"}),
    "marks": frozenset({"node", "dev", "impl"}),
    "events": frozenset({"kind", "detail"}),
}
