"""Benchmark: this sampler vs polling ``tc -s qdisc`` through a subprocess once per sample, same target rate.

    flock /run/testbed-bench.lock /usr/bin/python3 -m bench.sampler_rate [--seconds 3] [--rate 1000]

builds 10 namespaces x 4 shaped ports (``benchnet.scale_net``, prefix tbd4) and prints both achieved rates, jitter
and CPU share (of one core; the tc side counts its children), and the ratios. Run it under the bench lock.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.telemetry.control import start_sampler
from testbed.telemetry.gaps import GapStats
from testbed.telemetry.ports import PortRef


def bench_sampler(ports: list[PortRef], seconds: float = 3.0, rate_hz: float = 1000, **settings: Any) -> dict[str, Any]:
    """Run the real sampler process for ``seconds``; its health figures."""
    with tempfile.TemporaryDirectory(prefix="tbd4-bench-") as tmp:
        h = start_sampler(None, ports, Path(tmp), rate_hz=rate_hz, **settings)
        time.sleep(seconds)
        health = h.stop()
    return {
        "rate_hz_min": health["rate_hz_min"],
        "jitter_max": health["jitter_max"],
        "cpu_share": health["cpu_share"],
        "namespaces": health["namespaces"],
        "queues": health["queues"],
        "scheduling": health["scheduling"],
        "late_ticks": health["late_ticks"],
        "worst_gaps": max(health["per_netns"].values(), key=lambda g: g["jitter"]),
        "gap_max_ms": max(g["gap_max_ms"] for g in health["per_netns"].values()),
        "rows": health["rows"],
    }


def bench_tc(ports: list[PortRef], seconds: float = 3.0, rate_hz: float = 1000) -> dict[str, Any]:
    """Poll ``tc -n NS -s qdisc show`` (one subprocess per namespace per sample) at ``rate_hz`` for ``seconds``."""
    nss = sorted({p.netns for p in ports})
    gaps = {ns: GapStats() for ns in nss}
    period = 1.0 / rate_hz
    ru0s, ru0c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = nxt = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for ns in nss:
            subprocess.run(["tc", "-n", ns, "-s", "qdisc", "show"], check=True, capture_output=True)
            gaps[ns].add(time.monotonic())
        nxt += period
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            nxt = time.monotonic()
    wall = time.monotonic() - t0
    ru1s, ru1c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(getattr(b, f) - getattr(a, f) for a, b in ((ru0s, ru1s), (ru0c, ru1c)) for f in ("ru_utime", "ru_stime"))
    per = [g.summary() for g in gaps.values()]
    return {
        "rate_hz_min": min(s["rate_hz"] for s in per),
        "jitter_max": max(s["jitter"] for s in per),
        "cpu_share": round(cpu / wall, 4),
        "namespaces": len(nss),
        "queues": len(ports),
    }


def compare(ports: list[PortRef], seconds: float = 3.0, rate_hz: float = 1000) -> dict[str, Any]:
    """Both benchmarks and the ratios: rate (sampler/tc) and CPU per achieved sample (tc/sampler)."""
    s = bench_sampler(ports, seconds, rate_hz)
    t = bench_tc(ports, seconds, rate_hz)
    per_s = s["cpu_share"] / max(s["rate_hz_min"], 1e-9)
    per_t = t["cpu_share"] / max(t["rate_hz_min"], 1e-9)
    return {
        "target_hz": rate_hz,
        "seconds": seconds,
        "sampler": s,
        "tc": t,
        "rate_ratio": round(s["rate_hz_min"] / max(t["rate_hz_min"], 1e-9), 2),
        "cpu_per_sample_ratio": round(per_t / per_s, 1) if per_s > 0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.sampler_rate", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--namespaces", type=int, default=10)
    ap.add_argument("--ports", type=int, default=4)
    args = ap.parse_args(argv)
    from bench.benchnet import scale_net

    with scale_net("tbd4", args.namespaces, args.ports) as ports:
        res = compare(ports, args.seconds, args.rate)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
