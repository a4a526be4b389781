"""Per traffic class counters of a port with ``classes:`` (testbed.spec.classes), read from the classes' leaves.

Each class's leaf qdisc (handle 11:, 12:, ... under HTB class 1:11, 1:12, ...) counts what it sent (bytes and
packets as it dequeues them), what it dropped, what kernel RED marked, and what it holds now. The run reads them
once at its end into classes.csv. ``tc -j class show`` is not used: this iproute2 (6.1) prints no JSON for HTB
classes, so the leaves' qdisc statistics are the source.
"""

from __future__ import annotations

import json
from typing import Any

from testbed.host.procs import run_checked
from testbed.spec.classes import htb_plan
from testbed.spec.link import ETH_HEADER
from testbed.spec.topology import Port


def class_rows(port: Port, qdiscs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """classes.csv rows of one port from its ``tc -s -j qdisc show`` list."""
    link = port.link
    by_handle = {str(q.get("handle")): q for q in qdiscs}
    rows = []
    for c, h in zip(link.classes, htb_plan(link.classes, link.mtu + ETH_HEADER), strict=True):
        q = by_handle.get(f"{h.minor:x}:")
        if q is None:
            raise RuntimeError(f"{port.name}: the leaf {h.minor:x}: of class {c.name} is missing")
        rows.append(
            {
                "node": port.node,
                "dev": port.dev,
                "class": c.name,
                "dscp": " ".join(map(str, c.dscp)),
                "priority": c.priority,
                "weight": c.weight,
                "tx_bytes": q.get("bytes", 0),
                "tx_pkts": q.get("packets", 0),
                "drops": q.get("drops", 0),
                "marks": q.get("marked", (q.get("xstats") or {}).get("marked")),
                "backlog_bytes": q.get("backlog", 0),
            }
        )
    return rows


def read(netns: str, port: Port) -> list[dict[str, Any]]:
    """One port's rows now."""
    out = run_checked(["tc", "-s", "-j", "qdisc", "show", "dev", port.dev], netns=netns)
    return class_rows(port, json.loads(out or "[]"))
