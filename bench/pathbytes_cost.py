"""What counting each flow's bytes per spine costs (testbed.fabric.pathbytes), side by side with it off.

    flock /run/tb-dev-emulation.lock /usr/bin/python3 -m bench.pathbytes_cost [--rate 50] [--mtu 1500] [--runs 3]

Figure (a)'s fabric and traffic (bench.capacity: 2 spines x 4 leaves x 2 hosts, 8 iperf3 flows in a ring, 4 of
them through a spine). One fabric; the trials alternate with the spines' nftables table in place and deleted, so
both see the same build. MTU 1500 at 50 Mbit/s per link is the packet rate figure (a) found faithful at 60% CPU:
the costliest load a faithful run puts through the spines. Prints each trial's machine CPU busy share and worst
flow (share of its payload rate), then the ratio of the means, on/off.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

from bench.ring import RingResult, ring_trial
from testbed.calibrate.rig import fabric_spec_dict
from testbed.fabric import pathbytes
from testbed.fabric.build import Fabric
from testbed.host.procs import run_checked
from testbed.invocation import enter
from testbed.spec.fabric import FabricSpec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=50.0, help="Mbit/s per link")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--runs", type=int, default=3, help="trials of each setting, alternating")
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    spec = FabricSpec.from_dict(fabric_spec_dict(args.rate * 1e6, args.mtu))
    results: dict[str, list[RingResult]] = {"on": [], "off": []}
    with Fabric(spec, lock_wait=30) as fab:
        hosts = [(n, h.ip) for n, h in fab.hosts.items()]

        def spawn(host: str, argv: list[str], out: Any) -> Any:
            return fab.procs.spawn(f"iperf3-{host}", argv, netns=fab.netns(host), stdout=out)

        for _ in range(args.runs):
            for setting in ("on", "off"):
                for node in fab.path_nodes:
                    if setting == "on":
                        pathbytes.attach(fab.netns(node))
                    else:
                        run_checked(["nft", "delete", "table", "ip", pathbytes.TABLE], netns=fab.netns(node))
                res = ring_trial(spawn, hosts, args.rate * 1e6, args.mtu, args.seconds)
                results[setting].append(res)
                print(f"path_bytes {setting:3}: CPU busy {res.cpu_busy:.3f}, worst flow {res.worst:.3f}", flush=True)
            for node in fab.path_nodes:  # back as built: the fabric's teardown finds it as it left it
                pathbytes.attach(fab.netns(node))
    on, off = (statistics.mean(r.cpu_busy for r in results[s]) for s in ("on", "off"))
    print(
        f"{args.rate:g} Mbit/s per link, MTU {args.mtu}, {args.runs} trials each: CPU busy on {on:.3f} "
        f"(range {min(r.cpu_busy for r in results['on']):.3f}-{max(r.cpu_busy for r in results['on']):.3f}), "
        f"off {off:.3f} (range {min(r.cpu_busy for r in results['off']):.3f}-"
        f"{max(r.cpu_busy for r in results['off']):.3f}); on/off {on / off:.3f}"
    )
    return 0


if __name__ == "__main__":
    enter(os.environ)  # this program's own entry: where its fabrics' run lock is
    raise SystemExit(main())
