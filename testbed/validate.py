"""`testbed validate FILE [--set KEY=VALUE ...]`: check a scenario file without running it, and without root.

It loads the file (every sweep point and repetition, as `run` does), runs `run`'s own preflight on every point
(``testbed.plan.point.plan_point``: capabilities, the guest fit, the fabric's size, the time bounds, the kernel queue
telemetry, the CPU budget against this machine's cached calibration or the built-in estimate) and prints each
variant's plan (``testbed.plan.text``: the spec's and, for a point that would run, its ports' as planned). Exit 0 when every point would run, 2 with one line per refusal otherwise.

The capability probe needs root for its trials in a scratch namespace (qdiscs, ifb, ECMP hashing, nftables,
the ECN marking implementations). Without root those are not probed; validate then assumes them present and
says so, and checks everything else: tools, congestion controls, Mininet, BTF, the bounds and the budget.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from testbed.calibrate.cache import describe_status
from testbed.errors import TestbedError
from testbed.host.capabilities import Capabilities
from testbed.host.machine import Machine
from testbed.host.trials import QDISC_TRIALS
from testbed.machine import probe, with_caps
from testbed.plan import budget as pf_budget
from testbed.plan.labels import variant_text
from testbed.plan.point import PointPlan, plan_point
from testbed.plan.text import plan_lines, port_lines
from testbed.spec.fields import SpecError
from testbed.spec.scenario import Scenario, load_scenario_file
from testbed.spec.settings import parse_settings

UNPROBED = "qdiscs (htb, bfifo, netem, red, ...), ifb, ECMP hashing, nftables, the ECN marking implementations"


def assume_unprobed(caps: Capabilities) -> tuple[Capabilities, bool]:
    """``caps`` with what only the namespace trials find out assumed present when they did not run (not root),
    and whether anything was assumed. A probe that ran is left as it is."""
    if caps.netns is not None:
        return caps, False
    ecn = dataclasses.replace(
        caps.ecn,
        sch_red=True if caps.ecn.sch_red is None else caps.ecn.sch_red,
        bpf_marker=True if caps.ecn.bpf_marker is None else caps.ecn.bpf_marker,
        marking_auto=caps.ecn.marking_auto or "kernel",
        dctcp=caps.ecn.dctcp or "kernel",
    )
    assumed = dataclasses.replace(
        caps,
        qdiscs={
            **{q: True for q in QDISC_TRIALS},
            "tbf": True,
            **{q: v for q, v in caps.qdiscs.items() if v is not None},
        },
        ifb=True,
        ecmp_hash_policy_3=True,
        ecmp_hash_seed=True,
        nftables=bool(caps.tools.get("nft", True)),
        ecn=ecn,
    )
    return assumed, True


def _calibration_line(caps: Capabilities) -> str:
    st = dict(caps.calibration or {})
    if st.get("status") == "calibrated":
        return f"CPU budget: against this machine's calibration ({describe_status(st)[0]})"
    why = "its calibration is stale" if st.get("status") == "stale" else "this machine is not calibrated"
    return f"CPU budget: against the built-in estimate: {why} (`testbed calibrate` measures it, as root)"


def _verdict(point: Scenario, machine: Machine) -> PointPlan | str:
    """The point's plan, or its refusal in one line."""
    try:
        return plan_point(point, machine)
    except SpecError as exc:
        return str(exc)


def _load_line(point: Scenario, machine: Machine, plan: PointPlan | None) -> str:
    try:
        v = plan.budget if plan is not None and plan.budget is not None else None
        topo = plan.topo if plan is not None else point.topology()
        v = v or pf_budget.check_budget(point, machine.caps, env=machine.env, topo=topo)
    except TestbedError as exc:
        return f"  CPU: not estimated ({exc})"
    e = v.estimate
    how = "calibrated" if v.model.calibrated else "uncalibrated estimate"
    return (
        f"  CPU: predicted {e.total:.0%} of {e.cores} cores (busiest interval {e.peak:.0%}) against a budget of "
        f"{v.budget:.0%} ({how})"
    )


def validate(path: str | Path, settings: Sequence[str] = (), out: TextIO | None = None) -> list[str]:
    """Print the file's plan (to ``out``, default stdout), variant by variant, and return the refusals (empty:
    every point would run). A file that does not load raises its SpecError (one line) before anything is
    printed."""
    out = sys.stdout if out is None else out
    sf = load_scenario_file(path, parse_settings(settings))
    caps, assumed = assume_unprobed(probe())
    machine = with_caps(caps, os.environ)  # `testbed validate`'s own environment
    variants: dict[tuple[object, ...], list[Scenario]] = {}
    for point in sf.points:
        variants.setdefault(tuple(repr(v) for v in point.variant), []).append(point)
    repeat = sf.base.repeat
    print(
        f"{path}: scenario {sf.base.name!r}, {len(sf.points)} point(s): {len(variants)} variant(s) x {repeat} "
        f"repeat(s)" + (f"; with {', '.join('--set ' + s for s in settings)}" if settings else ""),
        file=out,
    )
    if assumed:
        print(f"capabilities: not root, so not probed and assumed present: {UNPROBED}", file=out)
    else:
        print("capabilities: probed (as root)", file=out)
    print(_calibration_line(caps), file=out)
    refusals = []
    for i, (_, points) in enumerate(variants.items(), 1):
        head = variant_text(points[0]) or "the scenario (no sweep)"
        print(f"\nvariant {i}/{len(variants)}: {head}", file=out)
        verdicts = [_verdict(p, machine) for p in points]
        first = verdicts[0] if isinstance(verdicts[0], PointPlan) else None
        for line in plan_lines(points[0], first.topo if first is not None else points[0].topology()):
            print(f"  {line}", file=out)
        for line in port_lines(first) if first is not None else []:
            print(f"  {line}", file=out)
        print(_load_line(points[0], machine, first), file=out)
        reasons = dict.fromkeys(r for r in verdicts if isinstance(r, str))
        for reason in reasons:
            print(f"  REFUSED: {reason}", file=out)
        refusals += list(reasons)
        if not reasons:
            print(f"  would run ({len(points)} repeat(s))", file=out)
    return refusals


def validate_main(path: str | Path, settings: Sequence[str] = (), out: TextIO | None = None) -> int:
    """`testbed validate`: 0 when every point would run; else 2, each refusal on one line on stderr."""
    out = sys.stdout if out is None else out
    refusals = validate(path, settings, out)
    if refusals:
        for reason in refusals:
            print(f"error: {reason}", file=sys.stderr)
        return 2
    print("\nevery point would run", file=out)
    return 0
