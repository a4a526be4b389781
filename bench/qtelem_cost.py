"""The queue poller against the kernel queue telemetry, side by side under the same traffic.

    flock /run/tb-dev-emulation.lock /usr/bin/python3 -m bench.qtelem_cost [--seconds 8] [--runs 3] [--json FILE] [--baseline TREE]

Builds the default experiment's fabric (bench.sampler_cost: 14 namespaces, 32 queues, 50 Mbit/s, MTU 9000) with 8
iperf3 flows in a ring, then alternates, ``--runs`` times each: the poller (``start_sampler`` at 1 kHz, links
100 Hz) and the kernel telemetry (``start_qslots``, 100 us slots). Cost: the poller's health cpu_share; for the
kernel telemetry, its reader's CPU (/proc) plus its programs' run time (``BPF_ENABLE_STATS``, held by this process
only while it measures, so nothing stays enabled). Then one run with both at once checks agreement: wherever a
poller row saw a backlog, the kernel's max and min over the slots within 1 ms of it bracket it (to a frame).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.sampler_cost import SPEC, proc_cpu, start_traffic
from testbed.bpf.bpfsys import _bpf
from testbed.fabric.build import Fabric
from testbed.invocation import enter
from testbed.spec.fabric import FabricSpec

BPF_ENABLE_STATS = 32
FRAME = 9014


class _EnableStats(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32)]  # BPF_STATS_RUN_TIME = 0


def prog_stats() -> dict[str, tuple[int, int]]:
    """Run time (ns) and run count of each loaded qt_* program, from bpftool."""
    out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=True).stdout
    return {
        str(p["name"]): (int(p.get("run_time_ns", 0)), int(p.get("run_cnt", 0)))
        for p in json.loads(out)
        if str(p.get("name", "")).startswith("qt_")
    }


def poller_run(fab: Fabric, out: Path, seconds: float) -> dict[str, Any]:
    from testbed.plan import refs
    from testbed.telemetry import control

    h = control.start_sampler(fab.procs, refs.sampler_ports(fab), out, rate_hz=1000, link_hz=100, cpu_hz=10)
    time.sleep(seconds)
    health = h.stop()
    return {"kind": "poller", "cpu_share": health["cpu_share"], "rate_hz": health["rate_hz_min"]}


def bpf_run(fab: Fabric, out: Path, seconds: float, slot_us: float, tree: Path | None = None) -> dict[str, Any]:
    """The kernel telemetry's cost over ``seconds``; its reader runs from source tree ``tree`` (default: this one),
    which loads that tree's build/bpf objects."""
    from testbed.host import child
    from testbed.plan import refs
    from testbed.spec.scenario import TelemetrySpec
    from testbed.telemetry.qslots import start_qslots

    out.mkdir(parents=True, exist_ok=True)
    home = child.REPO
    child.REPO = tree or home  # start_qslots runs ``python3 -m testbed.telemetry.qslots`` with cwd=REPO
    try:
        h = start_qslots(
            fab.procs, refs.qslots_config(fab, TelemetrySpec(bpf_queues=True, slot_us=slot_us).slot_ns), out
        )
    finally:
        child.REPO = home
    u0, s0 = proc_cpu(h.proc.pid)
    p0, t0 = prog_stats(), time.monotonic()
    time.sleep(seconds)
    p1, (u1, s1), wall = prog_stats(), proc_cpu(h.proc.pid), time.monotonic() - t0
    health = h.stop()
    busy = [p for p in health["ports"].values() if p["deq_pkts"]]
    per = {n: (p1[n][0] - p0.get(n, (0, 0))[0], p1[n][1] - p0.get(n, (0, 0))[1]) for n in p1}
    prog_s = sum(ns for ns, _ in per.values()) / 1e9
    return {
        "kind": "bpf" if tree is None else "bpf-baseline",
        "cpu_share": round(((u1 - u0) + (s1 - s0) + prog_s) / wall, 4),
        "reader_share": round(((u1 - u0) + (s1 - s0)) / wall, 4),
        "programs_share": round(prog_s / wall, 4),
        "slot_hz": 1e6 / health["slot_us"],
        "rows_per_s": round(health["rows"] / health["duration_s"]),
        "busy_ports": len(busy),
        "lost_slots": health["lost_slots"],
        "soj_miss": sum(p.get("soj_miss", 0) for p in health["ports"].values()),
        "programs": {
            n: {"runs_per_s": round(c / wall), "ns_per_run": round(ns / c) if c else None} for n, (ns, c) in per.items()
        },
    }


def agreement(out: Path) -> dict[str, Any]:
    """Poller rows with a backlog that the kernel's slots within 1 ms bracket, to one frame."""
    import pandas as pd

    q = pd.read_csv(out / "queues.csv", dtype={"node": str, "dev": str})
    s = pd.read_csv(out / "qslots.csv", dtype={"node": str, "dev": str})
    q = q[q["backlog_bytes"] > 0]
    ok = n = 0
    for (node, dev), rows in q.groupby(["node", "dev"]):
        k = s[(s["node"] == node) & (s["dev"] == dev)].sort_values("t")
        if k.empty:
            n += len(rows)
            continue
        t = k["t"].to_numpy()
        lo = np.searchsorted(t, rows["t"].to_numpy() - 1e-3)
        hi = np.searchsorted(t, rows["t"].to_numpy() + 1e-3)
        bmax, bmin = k["backlog_max"].to_numpy(), k["backlog_min"].to_numpy()
        for b, a, z in zip(rows["backlog_bytes"].to_numpy(), lo, hi, strict=True):
            n += 1
            ok += bool(z > a and bmax[a:z].max() + FRAME >= b and bmin[a:z].min() - FRAME <= b)
    return {"poller_rows_with_backlog": n, "bracketed": ok, "share": round(ok / n, 4) if n else None}


def both_run(fab: Fabric, out: Path, seconds: float, slot_us: float) -> dict[str, Any]:
    from testbed.plan import refs
    from testbed.spec.scenario import TelemetrySpec
    from testbed.telemetry import control
    from testbed.telemetry.qslots import start_qslots

    out.mkdir(parents=True, exist_ok=True)
    q = start_qslots(fab.procs, refs.qslots_config(fab, TelemetrySpec(bpf_queues=True, slot_us=slot_us).slot_ns), out)
    p = control.start_sampler(fab.procs, refs.sampler_ports(fab), out, rate_hz=1000, link_hz=100, cpu_hz=10)
    time.sleep(seconds)
    p.stop()
    q.stop()
    return agreement(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.qtelem_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--slot-us", type=float, default=100.0, help="the kernel telemetry's slot (default 100)")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="a source tree (a git worktree of an older commit, its BPF built) whose kernel telemetry alternates "
        "with this one's under the same traffic, as kind bpf-baseline",
    )
    args = ap.parse_args(argv)
    results: list[dict[str, Any]] = []
    kinds = ("poller", "bpf", "bpf-baseline") if args.baseline else ("poller", "bpf")
    total = (len(kinds) * args.runs + 1) * (args.seconds + 3) + 10
    stats_fd = _bpf(BPF_ENABLE_STATS, _EnableStats(0))
    try:
        with (
            tempfile.TemporaryDirectory(prefix="tb-qtelem-cost-") as tmp,
            Fabric(FabricSpec.from_dict(SPEC), lock_wait=600) as fab,
        ):
            d = Path(tmp)
            traffic = start_traffic(fab, total, d)
            time.sleep(1.0)  # past slow start: queues are filling
            for i in range(args.runs):
                for kind in kinds if i % 2 == 0 else kinds[::-1]:
                    out = d / f"run{len(results)}"
                    if kind == "poller":
                        r = poller_run(fab, out, args.seconds)
                    else:
                        r = bpf_run(
                            fab, out, args.seconds, args.slot_us, args.baseline if kind == "bpf-baseline" else None
                        )
                    results.append(r)
                    print(json.dumps(r), flush=True)
            agree = both_run(fab, d / "both", args.seconds, args.slot_us)
            print(json.dumps({"agreement": agree}), flush=True)
            for p in traffic:
                p.stop(grace=1.0)
    finally:
        os.close(stats_fd)
    share = {k: [r["cpu_share"] for r in results if r["kind"] == k] for k in kinds}
    for k, v in share.items():
        print(f"{k:12s} cpu_share mean {statistics.mean(v):.4f} [{min(v):.4f}, {max(v):.4f}] over {len(v)} runs")
    for k in kinds[1:]:
        print(f"{k}/poller cpu_share: {statistics.mean(share[k]) / statistics.mean(share['poller']):.3f}")
    if args.baseline:
        print(
            f"bpf/bpf-baseline cpu_share: {statistics.mean(share['bpf']) / statistics.mean(share['bpf-baseline']):.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"runs": results, "agreement": agree}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    enter(os.environ)  # this program's own entry: where its fabrics' run lock is
    raise SystemExit(main())
