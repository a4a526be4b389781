"""tc itself against testbed.spec.units: each rate and size spelling, set by tc on a scratch qdisc, reads back as
the number our parser gives (as root).

A private network namespace holds one veth pair (a kernel without the dummy module has veth); tc sets ``tbf rate <spelling>`` (tc keeps bytes per second) and
``bfifo limit <spelling>`` (bytes) on it and ``tc -j qdisc show`` reads them back. The namespace is this test's own
(named with its pid) and is deleted by that name afterwards.
Run: `flock /tmp/tb-emulation.lock /usr/bin/python3 -m pytest tests/root/test_tc_units.py -q`.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from testbed.spec.units import parse_rate, parse_size

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a network namespace, tc)"),
]

RATES = [
    "100Mbit",
    "100mbit",
    "1.5kbit",
    "64Kibit",
    "2mibit",
    "1Gibit",
    "10Gbit",
    "100bps",
    "250kbps",
    "100mbps",
    "100MBps",
    "10Gbps",
    "1KiBps",
    "3mibps",
    ".5mbit",
]

SIZES = ["1500", "1500b", "64k", "64K", "64kb", "30KB", "300KB", "2m", "4MB", "1g", "64kbit", "1mbit", "1.5k", "0.7k"]


def _sh(*cmd: str) -> str:
    res = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.returncode} {res.stderr.strip()}")
    return res.stdout


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    name = f"tbd-units-{os.getpid()}"
    _sh("ip", "netns", "add", name)
    try:
        _sh("ip", "-n", name, "link", "add", "u0", "type", "veth", "peer", "name", "u1")
        _sh("ip", "-n", name, "link", "set", "u0", "up")
        yield name
    finally:
        _sh("ip", "netns", "delete", name)


def _root_qdisc(ns: str, *args: str) -> dict:
    tc = ("ip", "netns", "exec", ns, "tc")
    subprocess.run([*tc, "qdisc", "del", "dev", "u0", "root"], capture_output=True, timeout=30)  # none yet: fine
    _sh(*tc, "qdisc", "add", "dev", "u0", "root", "handle", "1:", *args)
    shown = json.loads(_sh(*tc, "-j", "qdisc", "show", "dev", "u0"))
    return next(q for q in shown if q.get("handle") == "1:")


@pytest.mark.parametrize("spelling", RATES)
def test_tc_sets_the_rate_we_read(netns: str, spelling: str) -> None:
    ours = parse_rate(spelling)
    burst = str(max(ours // 8 // 10, 16_384))  # 100 ms at the rate: tbf takes any burst above one frame
    q = _root_qdisc(netns, "tbf", "rate", spelling, "burst", burst, "limit", "100000")
    assert q["options"]["rate"] == ours // 8, f"{spelling}: tc set {q['options']['rate']} B/s, we read {ours} bit/s"


@pytest.mark.parametrize("spelling", SIZES)
def test_tc_sets_the_size_we_read(netns: str, spelling: str) -> None:
    ours = parse_size(spelling)
    assert ours.unit == "bytes"
    q = _root_qdisc(netns, "bfifo", "limit", spelling)
    assert q["options"]["limit"] == ours.value, f"{spelling}: tc set {q['options']['limit']} B, we read {ours.value}"
