"""What running a sweep through the cluster client costs, against running it here.

    /usr/bin/python3 -m bench.cluster_overhead [--points 4] [--runs 2] [--json FILE]

The same sweep of small points (one flow across a spine, swept over the buffer) runs ``--runs`` times each way,
alternating: ``testbed run FILE`` on this machine (the baseline), and ``testbed run FILE --cluster ADDRESS`` on a
LocalCluster of one testbed worker process started beforehand (its start-up is printed apart, not counted). Both
are timed from the command's start to its exit, report included. Printed: seconds per point each way, their
difference (the client's and worker's overhead per point: submission, the point's own process, packing and
landing the record) and the ratio cluster/local. Needs root; holds the emulation lock by taking turns with it
through the run lock like any run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SWEEP = """\
name: cluster-bench
description: a small point swept over the buffer (bench.cluster_overhead)
fabric:
  topology: spine-leaf
  spines: 1
  leaves: 2
  hosts_per_leaf: 1
  host_link: {{rate: 50Mbit, buffer: 100KB, mtu: 9000}}
workload:
  - {{kind: iperf, name: pair, src: l1h1, dst: l2h1, duration: 3}}
duration: 20s
sweep:
  fabric.host_link.buffer: [{buffers}]
"""


def timed(argv: list[str]) -> float:
    t0 = time.monotonic()
    cp = subprocess.run(["/usr/bin/python3", "-m", "testbed", *argv], cwd=REPO, capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"bench.cluster_overhead: {' '.join(argv)} exited {cp.returncode}: {cp.stderr[-500:]}")
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.cluster_overhead")
    ap.add_argument("--points", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from distributed import LocalCluster

    from testbed.cluster.task import worker_options
    from testbed.machine import probe

    buffers = ", ".join(f"{100 + 50 * i}KB" for i in range(args.points))
    opts = worker_options(probe().to_dict())
    opts.pop("nthreads")
    local: list[float] = []
    cluster: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tb-cluster-bench-") as tmp:
        scenario = Path(tmp) / "sweep.yaml"
        scenario.write_text(SWEEP.format(buffers=buffers))
        t0 = time.monotonic()
        with LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            local_directory=f"{tmp}/dask",
            **opts,
        ) as c:
            startup = time.monotonic() - t0
            for i in range(args.runs):
                local.append(timed(["run", str(scenario), "-o", f"{tmp}/local{i}"]))
                cluster.append(
                    timed(["run", str(scenario), "-o", f"{tmp}/cluster{i}", "--cluster", c.scheduler_address])
                )
    per_local = [t / args.points for t in local]
    per_cluster = [t / args.points for t in cluster]
    result: dict[str, Any] = {
        "points": args.points,
        "runs": args.runs,
        "worker_startup_s": round(startup, 2),
        "local_s_per_point": [round(x, 2) for x in per_local],
        "cluster_s_per_point": [round(x, 2) for x in per_cluster],
        "overhead_s_per_point": round(statistics.mean(per_cluster) - statistics.mean(per_local), 2),
        "ratio": round(statistics.mean(per_cluster) / statistics.mean(per_local), 3),
    }
    print(
        f"cluster overhead: {args.points}-point sweep x {args.runs} runs; local {statistics.mean(per_local):.2f} s/point "
        f"({min(per_local):.2f}-{max(per_local):.2f}), cluster (1 worker) {statistics.mean(per_cluster):.2f} s/point "
        f"({min(per_cluster):.2f}-{max(per_cluster):.2f}); overhead {result['overhead_s_per_point']:+.2f} s/point, "
        f"ratio {result['ratio']:.3f}; worker start-up {startup:.1f} s (not counted)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
