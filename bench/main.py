"""``python3 -m testbed bench``: print one line per figure, each tagged with this machine's description.

    python3 -m testbed bench [--only a,b,c,d] [--quick] [--json FILE] [--lock-wait SECONDS]

Figures: (a) emulation capacity vs stock Mininet (bench.capacity), (b) build + teardown time vs stock Mininet
(bench.buildtime), (c) queue sampling vs ``tc -s qdisc`` polling (bench.sampler_rate), (d) ring all-reduce
measured/ideal (bench.collective), (e) headroom: every native shipped scenario once, its CPU against the targets
(bench.headroom; ``--records DIR`` reads existing records instead of running). The whole run holds /run/testbed-bench.lock (do not wrap it in flock(1): that
would be a second holder and the bench would wait for itself). See docs/bench.md.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.host.capabilities import Capabilities

LOCK = Path("/run/testbed-bench.lock")


def machine() -> dict[str, Any]:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = " ".join(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {"kernel": platform.release(), "cpu": model, "cores": os.cpu_count(), "host": platform.node()}


def tag(m: dict[str, Any]) -> str:
    return f"[{m['kernel']} | {m['cpu']} | {m['cores']} cores]"


@contextmanager
def bench_lock(wait_s: float) -> Iterator[None]:
    with open(LOCK, "a+") as fh:
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{LOCK} is held by another measurement for more than {wait_s:g} s") from None
                if not told:
                    print(f"waiting for {LOCK} (another measurement is running)", file=sys.stderr, flush=True)
                    told = True
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _capacity_text(x: Any, top: float) -> str:
    text = f"{'>= ' if x.best_mbit == top else ''}{x.aggregate_mbit:g} Mbit/s"
    if x.unfaithful_below:
        text += f" (unfaithful at {', '.join(f'{r:g}' for r in x.unfaithful_below)} Mbit/link)"
    return text


def fig_capacity(quick: bool, caps: Capabilities) -> list[tuple[str, dict[str, Any]]]:
    from bench.capacity import RATES_MBIT, search

    rates = (50, 100) if quick else RATES_MBIT
    out = []
    for mtu in (1500, 9000):
        o = search("ours", mtu, rates)
        s = search("stock", mtu, rates)
        ratio = o.aggregate_mbit / s.aggregate_mbit if s.aggregate_mbit else float("nan")
        gso = max((r.max_avg_packet for _, r in s.trials), default=0.0)
        top = max(rates)

        line = (
            f"(a) capacity MTU {mtu}, 2x4x2, 8-flow ring, faithful = every flow >= 0.95 of payload rate: "
            f"ours {_capacity_text(o, top)} | stock Mininet {_capacity_text(s, top)} | ours/stock {ratio:.2f} "
            f"| stock queues' largest average packet {gso:.0f} B (frame {mtu + 14} B) "
            f"| trials rate:worst/cpu ours {o.describe()} ; stock {s.describe()}"
        )
        data = {
            "mtu": mtu,
            "ours_aggregate_mbit": o.aggregate_mbit,
            "stock_aggregate_mbit": s.aggregate_mbit,
            "ratio": ratio,
            "stock_max_avg_packet": gso,
            "ours": [(r, res.worst, res.cpu_busy, res.max_avg_packet) for r, res in o.trials],
            "stock": [(r, res.worst, res.cpu_busy, res.max_avg_packet) for r, res in s.trials],
            "errors": [o.error, s.error],
        }
        out.append((line, data))
    return out


def fig_build(quick: bool, caps: Capabilities) -> list[tuple[str, dict[str, Any]]]:
    from bench.buildtime import TOPOLOGIES, measure

    out = []
    for name in list(TOPOLOGIES)[: 1 if quick else None]:
        b = measure(name, caps)
        line = (
            f"(b) build+teardown {name} ({b.nodes} nodes, {b.links} links): ours {b.ours_s:.2f} s "
            f"(build {b.ours_build_s:.2f} + teardown {b.ours_teardown_s:.2f}) | stock Mininet {b.stock_s:.2f} s "
            f"(build {b.stock_build_s:.2f} + stop {b.stock_teardown_s:.2f}) | stock/ours {b.stock_s / b.ours_s:.2f}x"
        )
        out.append((line, vars(b)))
    return out


def fig_sampling(quick: bool, caps: Capabilities) -> list[tuple[str, dict[str, Any]]]:
    from bench.benchnet import scale_net
    from bench.sampler_rate import compare

    seconds = 2.0 if quick else 3.0
    with scale_net("tbd7", 10, 4) as ports:
        r = compare(ports, seconds, 1000)
    s, t = r["sampler"], r["tc"]
    line = (
        f"(c) queue sampling, {s['queues']} queues in {s['namespaces']} namespaces, target 1000 Hz, {seconds:g} s: "
        f"sampler {s['rate_hz_min']:.0f} Hz at {s['cpu_share']:.1%} of a core | tc -s qdisc per sample "
        f"{t['rate_hz_min']:.0f} Hz at {t['cpu_share']:.1%} | rate ratio {r['rate_ratio']}x, "
        f"CPU per sample ratio {r['cpu_per_sample_ratio']}x"
    )
    return [(line, r)]


def fig_collective(quick: bool, caps: Capabilities) -> list[tuple[str, dict[str, Any]]]:
    try:
        from bench.collective import measure
    except ImportError as exc:
        return [(f"(d) ring all-reduce measured/ideal: not available: {exc}", {"error": str(exc)})]
    res = measure(caps)
    cells = [f"{r:g} Mbit/s {v:.3f}" if isinstance(v, float) else f"{r:g} Mbit/s {v}" for r, v in res.items()]
    line = "(d) ring all-reduce measured/ideal, 8 ranks, non-blocking 2x4x2, MTU 9000 (median of 3): " + " | ".join(
        cells
    )
    return [(line, {str(k): v for k, v in res.items()})]


def fig_headroom(quick: bool, caps: Capabilities) -> list[tuple[str, dict[str, Any]]]:
    """Every native shipped scenario once (no retakes): one line each (bench.headroom)."""
    import tempfile

    from bench.headroom import lines, measure

    with tempfile.TemporaryDirectory(prefix="tb-headroom-") as tmp:
        return lines(measure(Path(tmp)))


FIGURES: dict[str, Callable[[bool, Capabilities], list[tuple[str, dict[str, Any]]]]] = {
    "a": fig_capacity,
    "b": fig_build,
    "c": fig_sampling,
    "d": fig_collective,
    "e": fig_headroom,
}


def bench_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m testbed bench", description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="a,b,c,d,e", help="comma-separated figures (a,b,c,d,e)")
    ap.add_argument("--records", type=Path, help="figure (e) from the run records under this directory; no run")
    ap.add_argument("--quick", action="store_true", help="fewer rates and topologies (a smoke test, not figures)")
    ap.add_argument("--json", type=Path, help="also write every figure's numbers to this JSON file")
    ap.add_argument("--lock-wait", type=float, default=600.0, help="seconds to wait for the bench lock")
    args = ap.parse_args(argv)
    wanted = [f.strip() for f in args.only.split(",") if f.strip()]
    unknown = [f for f in wanted if f not in FIGURES]
    if unknown:
        ap.error(f"unknown figure {unknown[0]!r} (choose from {', '.join(FIGURES)})")
    if args.records is not None:  # figure (e) from records: reads files only
        from bench.headroom import lines as headroom_lines
        from results.record import find_runs

        for line, _ in headroom_lines([r.manifest for r in find_runs([args.records])]):
            print(f"{tag(machine())} {line}", flush=True)
        return 0
    if os.geteuid() != 0:
        print("error: the benchmark builds namespaces and needs root", file=sys.stderr)
        return 2
    from testbed.machine import probe

    m = machine()
    results: dict[str, Any] = {"machine": m, "figures": {}}
    t0 = time.monotonic()
    rc = 0
    with bench_lock(args.lock_wait):
        caps = probe()
        print(f"machine {tag(m)}", flush=True)
        for key in wanted:
            t = time.monotonic()
            try:
                lines = FIGURES[key](args.quick, caps)
            except Exception as exc:  # one figure failing does not lose the others
                lines = [(f"({key}) failed: {type(exc).__name__}: {exc}", {"error": str(exc)})]
                rc = 1
            for line, _ in lines:
                print(f"{tag(m)} {line}", flush=True)
            results["figures"][key] = {
                "data": [d for _, d in lines],
                "lines": [ln for ln, _ in lines],
                "seconds": round(time.monotonic() - t, 1),
            }
    total = time.monotonic() - t0
    print(f"{tag(m)} bench total {total:.0f} s", flush=True)
    results["total_s"] = round(total, 1)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return rc
