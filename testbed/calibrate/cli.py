"""``testbed calibrate``: measure this machine's CPU cost of forwarding and of the queue sampler, once, and cache it.

testbed calibrate                                        # measure (about 35 s; builds a fabric), cache, print
testbed calibrate --show                                 # print the cached calibration
testbed calibrate --predict scenarios/*.yaml             # every point's predicted load against the budget
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from testbed.calibrate.cache import CACHE, load, save
from testbed.calibrate.record import Calibration, Machine
from testbed.calibrate.trials import measure
from testbed.invocation import enter


def format_calibration(cal: Calibration) -> str:
    m = cal.machine
    lines = [
        f"calibration of {m.kernel}, {m.cpus} x {m.cpu_model} ({cal.date}, rev {cal.revision}, {cal.duration_s:g} s)",
        f"  forwarding: {cal.per_crossing_s * 1e6:.2f} us per packet per veth + {cal.per_byte_s * 1e9:.3f} ns per byte",
        f"  queue sampler: {cal.sampler_per_tick_s * 1e6:.1f} us per tick + {cal.sampler_per_netns_s * 1e6:.1f} us per "
        f"namespace per tick + {cal.sampler_per_row_s * 1e6:.1f} us per row",
    ]
    model = cal.model
    for s in cal.forwarding:
        frame = s.bytes / s.crossings if s.crossings else 0.0
        pred = s.crossings * model.per_crossing_s + s.bytes * model.per_byte_s
        lines.append(
            f"  MTU {s.mtu} {s.rate_bps / 1e6:g} Mbit/s: {s.forwarding_core_s / s.wall_s:.2f} core forwarding measured, "
            f"{pred / s.wall_s:.2f} fitted ({s.crossings / s.wall_s / 1e3:.0f}k crossings/s, {frame:.0f} B average)"
        )
    for x in cal.sampler:
        pred = x.ticks * (model.sampler_per_tick_s + x.namespaces * model.sampler_per_netns_s) + x.rows * (
            model.sampler_per_row_s
        )
        lines.append(
            f"  sampler {x.namespaces} namespaces{' under traffic' if x.traffic else ', idle'}: "
            f"{x.cpu_s / x.duration_s:.2f} core measured, {pred / x.duration_s:.2f} fitted "
            f"({x.rows / x.duration_s:.0f} rows/s)"
        )
    lines += [f"  note: {n}" for n in cal.notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="testbed calibrate", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--predict", nargs="+", metavar="SCENARIO", help="print every point's predicted CPU load; no measuring"
    )
    ap.add_argument("--show", action="store_true", help="print the cached calibration; no measuring")
    ap.add_argument("--json", action="store_true", help="with --predict or --show: JSON")
    ap.add_argument("--wait", type=float, default=0.0, metavar="SECONDS", help="wait this long for another run's lock")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"where the calibration is kept (default {CACHE})")
    args = ap.parse_args(argv)
    enter(os.environ)  # `python3 -m testbed.calibrate` starts here: its run lock's directory
    if args.predict:
        from testbed.calibrate.cache import current_model
        from testbed.host.capabilities import Capabilities
        from testbed.host.machine import Machine as Here
        from testbed.plan.budget import cpu_budget
        from testbed.plan.predict import format_predictions, predict_rows

        here = Here.from_env(Capabilities(cpus=os.cpu_count() or 1), os.environ)  # the command's own context
        model = current_model()
        rows = predict_rows(args.predict, here, model)
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        print(f"budget {cpu_budget(here.env):.0%} of the machine; model: {model.source}")
        print(format_predictions(rows))
        return 0
    if args.show:
        cal = load(args.cache)
        if cal is None:
            print(f"not calibrated ({args.cache} missing or unreadable): run `sudo testbed calibrate`")
            return 1
        print(json.dumps(cal.to_dict(), indent=1) if args.json else format_calibration(cal))
        if not cal.matches(Machine.here()):
            print(f"STALE: this machine is {Machine.here()}; the preflight does not use it", file=sys.stderr)
        return 0
    if os.geteuid() != 0:
        print("error: calibrating builds a fabric: run as root", file=sys.stderr)
        return 2
    cal = measure(lock_wait=args.wait)
    save(cal, args.cache)
    print(format_calibration(cal))
    print(f"saved {args.cache}")
    return 0
