"""The calibration fabric and the instruments on it: its spec, re-rating its ports, reading its tx counters, and
the queue sampler run over it as in a run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testbed.calibrate.record import SamplerSample

SAMPLER_HZ, SAMPLER_LINK_HZ, SAMPLER_CPU_HZ = 1000.0, 100.0, 10.0  # a run's defaults (testbed.spec.scenario)


def fabric_spec_dict(rate_bps: float, mtu: int) -> dict[str, Any]:
    """The calibration fabric, which the benchmarks' capacity trials build too: a 2x4x2 spine-leaf (an 8-host ring:
    half the flows under one leaf, half across a spine), cubic without ECN, packet-level (``gso_max_segs 1``),
    drop-tail."""
    return {
        "topology": "spine-leaf",
        "spines": 2,
        "leaves": 4,
        "hosts_per_leaf": 2,
        "host_link": {"rate": f"{rate_bps:.0f}bit", "mtu": mtu, "buffer": "300KB"},
        "transport": {"cc": "cubic", "ecn": False, "gso_max_segs": 1},
    }


def set_links(fab: Any, mtu: int, rate_bps: float) -> None:
    """Every port of the built fabric to ``mtu`` and ``rate_bps`` (the HTB class as testbed.fabric.tc builds it)."""
    from testbed.fabric import tc
    from testbed.host.procs import run_checked

    frame = mtu + tc.ETH_HEADER
    burst = 2 * frame
    by_node: dict[str, list[str]] = {}
    for p in fab.ports():
        by_node.setdefault(p.node, []).append(p.dev)
    for node, devs in by_node.items():
        ns = fab.netns(node)
        run_checked(["ip", "-n", ns, "-batch", "-"], input="".join(f"link set dev {d} mtu {mtu}\n" for d in devs))
        lines = [
            f"class change dev {d} parent {tc.ROOT_HANDLE} classid {tc.CLASS_ID} htb rate {rate_bps:.0f}bit "
            f"ceil {rate_bps:.0f}bit burst {burst} cburst {burst} quantum {frame}\n"
            for d in devs
        ]
        run_checked(["tc", "-n", ns, "-batch", "-"], input="".join(lines))


def tx_counters(fab: Any) -> tuple[int, int, int]:
    """(tx packets, tx bytes) summed over every interface of every node, and tx packets of the hosts alone."""
    from testbed.host.procs import run_checked

    pk = by = host = 0
    for node in fab.topo.nodes:
        for link in json.loads(run_checked(["ip", "-n", fab.netns(node), "-s", "-j", "link", "show"]) or "[]"):
            if link.get("ifname") == "lo":
                continue
            tx = link.get("stats64", {}).get("tx", {})
            pk += int(tx.get("packets", 0))
            by += int(tx.get("bytes", 0))
            if node in fab.hosts:
                host += int(tx.get("packets", 0))
    return pk, by, host


def _sampler_refs(fab: Any, namespaces: int | None = None) -> list[Any]:
    from testbed.telemetry import PortRef

    nodes = list(fab.topo.nodes)[:namespaces] if namespaces else list(fab.topo.nodes)
    return [PortRef(fab.netns(p.node), p.dev, node=p.node) for p in fab.ports() if p.node in nodes]


def sampler_sample(health: dict[str, Any], namespaces: int, traffic: bool) -> SamplerSample:
    """One sampler lifetime as the fit takes it, from the sampler's health record."""
    rates = [float(s.get("rate_hz", 0.0)) for s in (health.get("per_netns") or {}).values()]
    duration = float(health.get("duration_s", 0.0))
    rows = health.get("rows") or {}
    return SamplerSample(
        namespaces=namespaces,
        ticks=(sum(rates) / len(rates) if rates else 0.0) * duration,
        rows=int(rows.get("queues", 0)) + int(rows.get("links", 0)),
        cpu_s=float(health.get("cpu_share", 0.0)) * duration,
        duration_s=duration,
        traffic=traffic,
    )


@contextmanager
def run_sampler(fab: Any, out: Path, namespaces: int | None = None) -> Iterator[Any]:
    """The queue sampler at a run's rates over the ports of ``namespaces`` of the fabric's nodes (or all), writing
    to ``out``; stopped on leaving."""
    from testbed.telemetry import start_sampler

    handle = start_sampler(
        fab.procs,
        _sampler_refs(fab, namespaces),
        out,
        rate_hz=SAMPLER_HZ,
        link_hz=SAMPLER_LINK_HZ,
        cpu_hz=SAMPLER_CPU_HZ,
    )
    try:
        yield handle
    finally:
        handle.stop()


def proc_cpu_s(proc: Any) -> float:
    """An owned process's user + system CPU seconds so far."""
    t = proc.cpu_times()
    return float(sum(t)) if t else 0.0
