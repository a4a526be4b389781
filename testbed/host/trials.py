"""The qdisc trials that find what this kernel can do: the argv after ``tc qdisc add dev DEV [root]`` for each
qdisc the testbed uses. The capability probe, the ECN probe and the guest check all try these same lines, so they
agree on what "this kernel has it" means.
"""

from __future__ import annotations

# kernel RED with ECN marking
RED_ECN_TRIAL: tuple[str, ...] = (
    "red",
    "limit",
    "400000",
    "min",
    "30000",
    "max",
    "90000",
    "avpkt",
    "1500",
    "burst",
    "21",
    "probability",
    "0.1",
    "bandwidth",
    "100mbit",
    "ecn",
)
QDISC_TRIALS: dict[str, tuple[str, ...]] = {
    "htb": ("htb", "default", "1"),
    "tbf": ("tbf", "rate", "1mbit", "burst", "10kb", "latency", "10ms"),
    "bfifo": ("bfifo", "limit", "100000"),
    "pfifo": ("pfifo", "limit", "100"),
    "red": RED_ECN_TRIAL,
    "netem": ("netem", "delay", "1ms"),
    "fq_codel": ("fq_codel",),
    "clsact": ("clsact",),
}
