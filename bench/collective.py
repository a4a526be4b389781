"""Figure (d): ring all-reduce measured / ideal time on a non-blocking fabric at 10, 100 and 200 Mbit/s.

2 spines x 4 leaves x 2 hosts (1:1), MTU 9000, 8 ranks (``ranks: all``), the traffic package's rank workers
(``traffic.ranked.RankedGenerator`` through the generator contract). The buffer is sized so that one ideal
iteration lasts about 0.5 s at each rate; 1 warm-up + 3 measured iterations; the figure is the median of the
measured iterations' time / ``ideal_s`` (the traffic package's formula).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from bench.ring import settle
from testbed.fabric.build import Fabric
from testbed.host.capabilities import Capabilities
from testbed.spec.fabric import FabricSpec

RATES_MBIT = (10, 100, 200)


def size_for(rate_mbit: float, ranks: int = 8, seconds: float = 0.5) -> int:
    """Bytes S whose ring all-reduce (2 (n-1)/n x S on every link) takes ``seconds`` at the link rate."""
    return int(seconds * rate_mbit * 1e6 / 8 / (2 * (ranks - 1) / ranks))


def one_rate(rate_mbit: float, caps: Capabilities | None = None) -> float:
    from testbed.spec.workload import parse_job
    from traffic.base import RunContext
    from traffic.ranked import RankedGenerator

    spec = FabricSpec.from_dict(
        {
            "spines": 2,
            "leaves": 4,
            "hosts_per_leaf": 2,
            "host_link": {"rate": f"{rate_mbit:g}Mbit", "mtu": 9000, "buffer": "300KB"},
            "transport": {"cc": "cubic", "gso_max_segs": 1},
        }
    )
    job = parse_job(
        {
            "kind": "allreduce",
            "name": "ar",
            "algorithm": "ring",
            "ranks": "all",
            "size": size_for(rate_mbit),
            "iterations": 3,
            "warmup": 1,
            "timeout": 30,
        },
        "bench",
    )
    settle()
    with tempfile.TemporaryDirectory(prefix="tbd7-coll-") as tmp, Fabric(spec, caps=caps, lock_wait=30) as fab:
        raw = Path(tmp)
        gen = RankedGenerator(job, 0)  # type: ignore[arg-type]
        gen.check(fab.caps)
        ctx = RunContext(hosts=fab.hosts, procs=fab.procs, raw_dir=raw, host_link=spec.host_link)
        try:
            gen.start(ctx)
            gen.wait(60)
        finally:
            gen.stop()
        rows = gen.parse(raw)["iterations"]
    ratios = [(r["t_end"] - r["t_start"]) / r["ideal_s"] for r in rows if not r["warmup"]]
    if not ratios:
        raise RuntimeError("no measured iteration completed")
    return statistics.median(ratios)


def measure(caps: Capabilities | None = None) -> dict[float, float | str]:
    out: dict[float, float | str] = {}
    for rate in RATES_MBIT:
        try:
            out[rate] = one_rate(rate, caps)
        except Exception as exc:  # the figure says why instead of the number
            out[rate] = f"not available: {type(exc).__name__}: {exc}"[:200]
    return out
