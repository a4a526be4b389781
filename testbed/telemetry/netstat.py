"""Per-namespace TCP/IP counters from /proc/net/netstat and /proc/net/snmp -> netstat.csv rows.

nstat keeps its history per user, not per namespace, so the files are read as each namespace sees
them: a helper thread enters the namespace and reads /proc/thread-self/net/* (``netns.read_proc_net``), which
costs no process spawn, so it is cheap enough to call during a run as well as at start and end.
"""

from __future__ import annotations

from collections.abc import Mapping

from testbed.telemetry.netns import read_proc_net

NETSTAT_HEADER = ("host", "phase", "counter", "value")
FILES = ("netstat", "snmp")
# The counters a report needs first (all parsed counters are returned; these must be present).
KEY_COUNTERS = ("TcpExt.TCPDeliveredCE", "Tcp.RetransSegs", "TcpExt.TCPTimeouts", "IpExt.InCEPkts")


def parse_counters(text: str) -> dict[str, int]:
    """/proc/net/netstat or /proc/net/snmp text -> {"Section.Name": value}.

    Both files pair a header line ``Tcp: A B C`` with a value line ``Tcp: 1 2 3``; values may be negative
    (Tcp.MaxConn is -1). Raises ValueError on unpaired or mismatched lines.
    """
    out: dict[str, int] = {}
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) % 2:
        raise ValueError("odd number of lines: header/value lines must come in pairs")
    for head, vals in zip(lines[0::2], lines[1::2], strict=True):
        hsec, _, hnames = head.partition(":")
        vsec, _, vnums = vals.partition(":")
        names, nums = hnames.split(), vnums.split()
        if hsec != vsec or len(names) != len(nums):
            raise ValueError(f"mismatched header/value lines for section {hsec!r}/{vsec!r}")
        for n, v in zip(names, nums, strict=True):
            out[f"{hsec}.{n}"] = int(v)
    return out


def read_counters(netns: str | None) -> dict[str, int]:
    """Every counter of /proc/net/netstat and /proc/net/snmp inside ``netns`` (None: this namespace)."""
    texts = read_proc_net(netns, FILES)
    out: dict[str, int] = {}
    for f in FILES:
        out.update(parse_counters(texts[f]))
    missing = [k for k in KEY_COUNTERS if k not in out]
    if missing:
        raise ValueError(f"namespace {netns!r}: counters missing from /proc/net: {', '.join(missing)}")
    return out


def snapshot_hosts(netns_by_host: Mapping[str, str | None], phase: str) -> list[dict[str, object]]:
    """netstat.csv rows {host, phase, counter, value} for every host (phase: "start" or "end")."""
    if phase not in ("start", "end"):
        raise ValueError(f"phase must be 'start' or 'end', got {phase!r}")
    rows: list[dict[str, object]] = []
    for host, ns in netns_by_host.items():
        for counter, value in sorted(read_counters(ns).items()):
            rows.append({"host": host, "phase": phase, "counter": counter, "value": value})
    return rows


def deltas(rows: list[dict[str, object]]) -> dict[tuple[str, str], int]:
    """(host, counter) -> end - start over netstat.csv rows (counters present in both phases)."""
    start: dict[tuple[str, str], int] = {}
    end: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (str(r["host"]), str(r["counter"]))
        (start if r["phase"] == "start" else end)[key] = int(str(r["value"]))
    return {k: end[k] - start[k] for k in end if k in start}
