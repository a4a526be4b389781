"""What the queue sampler costs in CPU on the default fabric, optionally two code trees side by side.

    flock /run/tb-dev-emulation.lock /usr/bin/python3 -m bench.sampler_cost [--seconds 8] [--rate 500]
        [--runs 3] [--idle] [--baseline DIR] [--also DIR ...] [--profile] [--json FILE]

Builds the default experiment's fabric (2 spines, 4 leaves, 2 hosts per leaf, 50 Mbit/s, MTU 9000: 14 namespaces,
32 queues), starts 8 iperf3 flows in a ring (host i -> host i+1) unless ``--idle``, then runs the sampler
(``start_sampler``, link_hz 100, cpu_hz 10) for ``--seconds`` per run and prints its health's cpu_share, its user
and system CPU (from /proc/PID/stat over the same stretch; the kernel splits the exact total by where its 250 Hz
tick landed, so the split is rough), the achieved rate, the gaps and the rows written.

``--baseline DIR``: a second source tree (e.g. ``git archive HEAD testbed | tar -x -C DIR``); each run then starts
the sampler from both trees one after the other, alternating which goes first, under the same traffic, and the
summary gives the ratio new/baseline (``--also``: more trees, labelled by their directory name). ``--profile``: instead, run the ``Sampler`` loop in this process under
cProfile for ``--seconds`` and print where its time went (not SCHED_FIFO, and cProfile inflates Python time).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from testbed.fabric.build import Fabric
from testbed.invocation import enter
from testbed.spec.fabric import FabricSpec

SPEC: dict[str, Any] = {
    "topology": "spine-leaf",
    "spines": 2,
    "leaves": 4,
    "hosts_per_leaf": 2,
    "host_link": {"rate": "50Mbit", "buffer": "300KB", "mtu": 9000},
}
PORT = 5401
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> tuple[float, float]:
    """(user s, system s) of a process so far, from /proc/PID/stat (fields 14 and 15, after the comm field)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def start_traffic(fab: Fabric, seconds: float, tmp: Path) -> list[Any]:
    """8 iperf3 flows in a ring, each lasting ``seconds``; returns the processes (servers and clients)."""
    hosts = [(n, h.ip) for n, h in fab.hosts.items()]
    procs = []
    for i, (name, _ip) in enumerate(hosts):
        procs.append(fab.procs.spawn(f"iperf3-s-{name}", ["iperf3", "-s", "-p", str(PORT + i)], netns=fab.netns(name)))
    time.sleep(0.5)
    for i, (name, _ip) in enumerate(hosts):
        j = (i + 1) % len(hosts)
        argv = ["iperf3", "-c", hosts[j][1], "-p", str(PORT + j), "-t", f"{seconds:g}"]
        procs.append(fab.procs.spawn(f"iperf3-c-{name}", argv, netns=fab.netns(name), stdout=tmp / f"c{i}.txt"))
    return procs


def one_run(fab: Fabric, tree: Path, out: Path, rate_hz: float, seconds: float) -> dict[str, Any]:
    """Start the sampler from source tree ``tree``, let it run ``seconds``, stop it -> summary of its cost."""
    from testbed.plan import refs
    from testbed.telemetry import control

    control.REPO = tree  # start_sampler runs ``python3 -m testbed.telemetry.sampler`` with cwd=REPO
    handle = control.start_sampler(fab.procs, refs.sampler_ports(fab), out, rate_hz=rate_hz, link_hz=100, cpu_hz=10)
    u0, s0 = proc_cpu(handle.pid)
    t0 = time.monotonic()
    time.sleep(seconds)
    u1, s1 = proc_cpu(handle.pid)
    wall = time.monotonic() - t0
    health = handle.stop()
    return {
        "tree": str(tree),
        "cpu_share": health["cpu_share"],
        "user": round((u1 - u0) / wall, 4),
        "system": round((s1 - s0) / wall, 4),
        "rate_hz_min": health["rate_hz_min"],
        "jitter_max": health["jitter_max"],
        "gap_p99_ms": max(g["gap_p99_ms"] for g in health["per_netns"].values()),
        "gap_max_ms": max(g["gap_max_ms"] for g in health["per_netns"].values()),
        "late_ticks": health["late_ticks"],
        "rows_per_s": round(health["rows"]["queues"] / health["duration_s"]),
        "link_rows_per_s": round(health["rows"]["links"] / health["duration_s"]),
    }


def profile(fab: Fabric, out: Path, rate_hz: float, seconds: float) -> None:
    """Run the Sampler loop in this process under cProfile and print the top functions by own time."""
    from testbed.plan import refs
    from testbed.telemetry.ports import SamplerConfig
    from testbed.telemetry.sampler import Sampler

    cfg = SamplerConfig(ports=refs.sampler_ports(fab), rate_hz=rate_hz, link_hz=100, cpu_hz=10)
    out.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(cfg, out)
    timer = threading.Timer(seconds, sampler.stop.set)
    prof = cProfile.Profile()
    ru0 = os.times()
    timer.start()
    try:
        prof.runcall(sampler.run)
    finally:
        sampler.close()
    ru1 = os.times()
    h = sampler.health(final=True)
    print(
        f"in-process: rate {h['rate_hz_min']} Hz, cpu user {ru1.user - ru0.user:.2f} s system "
        f"{ru1.system - ru0.system:.2f} s over {h['duration_s']} s, rows {h['rows']}"
    )
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    def stat(key: str) -> dict[str, float]:
        vals = [r[key] for r in rows]
        return {"mean": round(statistics.mean(vals), 4), "min": min(vals), "max": max(vals)}

    return {k: stat(k) for k in ("cpu_share", "user", "system", "rate_hz_min", "rows_per_s")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.sampler_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="per sampler run")
    ap.add_argument("--rate", type=float, default=500.0, help="queue polling rate, Hz")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle", action="store_true", help="no traffic")
    ap.add_argument("--baseline", type=Path, help="a second source tree to compare against")
    ap.add_argument("--also", type=Path, action="append", default=[], help="more trees (labelled by their name)")
    ap.add_argument("--profile", action="store_true", help="cProfile the loop in-process instead")
    ap.add_argument("--json", type=Path, help="write every run's numbers here")
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parents[1]
    labels = {here: "new"}
    if args.baseline is not None:
        labels[args.baseline.resolve()] = "baseline"
    labels.update({p.resolve(): p.resolve().name for p in args.also})
    trees = list(labels)[::-1]
    n_runs = 1 if args.profile else args.runs * len(trees)
    total = n_runs * (args.seconds + 1.5) + 5
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="tb-sampler-cost-") as tmp,
        Fabric(FabricSpec.from_dict(SPEC), lock_wait=600) as fab,
    ):
        d = Path(tmp)
        traffic = [] if args.idle else start_traffic(fab, total, d)
        time.sleep(1.0)  # past slow start: queues are filling
        if args.profile:
            profile(fab, d / "profile", args.rate, args.seconds)
        else:
            for i in range(args.runs):
                order = trees if i % 2 == 0 else trees[::-1]
                for tree in order:
                    r = one_run(fab, tree, d / f"run{len(results)}", args.rate, args.seconds)
                    r["label"] = labels[tree]
                    results.append(r)
                    print(
                        f"{r['label']:8s} cpu_share {r['cpu_share']:.3f} (user {r['user']:.3f} sys {r['system']:.3f})"
                        f" rate {r['rate_hz_min']:.1f} Hz jitter {r['jitter_max']:.3f} (gap p99 {r['gap_p99_ms']} ms,"
                        f" max {r['gap_max_ms']} ms) late {r['late_ticks']}"
                        f" rows/s {r['rows_per_s']} links/s {r['link_rows_per_s']}",
                        flush=True,
                    )
        for p in traffic:
            p.stop(grace=1.0)
    if results:
        by = {lab: [r for r in results if r["label"] == lab] for lab in labels.values()}
        summary = {lab: summarize(rs) for lab, rs in by.items() if rs}
        for lab, s in summary.items():
            c, u, y = s["cpu_share"], s["user"], s["system"]
            print(
                f"{lab:8s} cpu_share mean {c['mean']:.3f} [{c['min']:.3f}, {c['max']:.3f}] (user {u['mean']:.3f} sys "
                f"{y['mean']:.3f}) rate {s['rate_hz_min']['mean']:.1f} Hz over {len(by[lab])} runs"
            )
        if "baseline" in summary:
            for lab in summary:
                if lab != "baseline":
                    ratio = summary[lab]["cpu_share"]["mean"] / summary["baseline"]["cpu_share"]["mean"]
                    print(f"{lab}/baseline cpu_share: {ratio:.3f}")
        if args.json:
            args.json.write_text(json.dumps({"runs": results, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    enter(os.environ)  # this program's own entry: where its fabrics' run lock is
    raise SystemExit(main())
