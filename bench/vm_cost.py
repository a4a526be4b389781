"""What one guest run costs: boot (cold cache with the kernel download, and cached), one `python3 -c pass`
inside, and a 100 Mbit/s HTB-shaped iperf3 inside (bench/vm_iperf.sh). Holds the benchmark lock.

    /usr/bin/python3 -m bench.vm_cost [--cold] [--mtu 1500]   (from the repo root)
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

from testbed.invocation import enter
from testbed.vm import ensure_kernel, run_in_guest
from testbed.vm.guest import BENCH_LOCK

REPO = Path(__file__).resolve().parents[1]
PY_LOOP = (
    "for i in 1 2 3 4 5; do s=$(date +%s%N); /usr/bin/python3 -c pass; e=$(date +%s%N); echo py $(( (e-s)/1000000 ));"
    " done"
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", action="store_true", help="also fetch the kernel into an empty cache and boot from it")
    ap.add_argument("--mtu", type=int, default=1500)
    args = ap.parse_args()
    with open(BENCH_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if args.cold:
            with tempfile.TemporaryDirectory(prefix="tbvm-cold-", dir="/var/lib/testbed") as tmp:
                t0 = time.monotonic()
                ensure_kernel("debian-6.1", Path(tmp))
                fetch = time.monotonic() - t0
                res = run_in_guest(["true"], cache=Path(tmp), stream=False)
                print(f"cold: fetch+extract {fetch:.1f} s, then boot {res.boot_s:.1f} s, run {res.wall_s:.1f} s")
        res = run_in_guest(["true"], stream=False)
        print(f"cached boot: {res.boot_s:.1f} s to the command, {res.wall_s:.1f} s for `true` ({res.accel})")
        res = run_in_guest(["sh", "-c", PY_LOOP], stream=False)
        ms = [int(ln.split()[1]) for ln in res.output.splitlines() if ln.startswith("py ")]
        print(f"python3 -c pass inside: {ms} ms (first is cold); run {res.wall_s:.1f} s")
        res = run_in_guest(["sh", "bench/vm_iperf.sh", str(args.mtu), "5"], cwd=REPO, stream=False)
        start = res.output.find("{")
        rep = json.JSONDecoder().raw_decode(res.output[start:])[0]
        end = rep["end"]
        rx = end["sum_received"]["bits_per_second"] / 1e6
        print(
            f"iperf3 via htb 100 Mbit/s, MTU {args.mtu}: {rx:.1f} Mbit/s received, "
            f"retrans {end['sum_sent'].get('retransmits')}, guest cpu {end['cpu_utilization_percent']['host_total']:.0f}%"
            f"; run {res.wall_s:.1f} s (boot {res.boot_s:.1f} s)"
        )
    return 0


if __name__ == "__main__":
    enter(os.environ)  # this program's own entry: the host's run lock, held while a guest runs
    raise SystemExit(main())
