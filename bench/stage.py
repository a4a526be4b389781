"""Benchmark: the queue sampler writing its record over the guest's 9p share vs staged on tmpfs, side by side.

    python3 -m testbed vm -- /usr/bin/python3 -m bench.stage [--runs 3] [--out runs/bench-stage]

Runs the buffer-sizing scenario's B point (125 KB; the point whose CI takes stalled on 9p flushes) ``--runs``
times each way, alternating, in one guest: ``direct`` writes queues.csv & co. into the 9p run directory as
before, ``staged`` lets ``testbed.host.staging`` stage them on /dev/shm. Prints one line per run (achieved
sampling rate against the target, longest gap between two dumps, the fidelity verdict) and the medians and
worst values of each mode. Every record stays under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from testbed.invocation import enter
from testbed.spec.scenario import ScenarioFile, expand

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "buffer_sizing.yaml"


def _point() -> ScenarioFile:
    data = yaml.safe_load(SCENARIO.read_text())
    data.pop("sweep", None)
    data["fabric"]["host_link"]["buffer"] = "125KB"
    return expand(data)


def _figures(path: Path) -> dict[str, Any]:
    health = json.loads((path / "sampler_health.json").read_text())
    gap = max(float(s.get("gap_max_ms", 0.0)) for s in health["per_netns"].values())
    man = json.loads((path / "manifest.json").read_text())
    fid = man.get("fidelity") or {}
    return {
        "rate": health["rate_hz_min"] / health["target_hz"],
        "gap_ms": gap,
        "late": health["late_ticks"],
        "faithful": fid.get("faithful"),
        "failed": fid.get("failed"),
        "staged": "staging" in health,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.stage", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-stage"))
    args = ap.parse_args(argv)
    from testbed.machine import here
    from testbed.run import run_file
    from testbed.telemetry import control

    for_out = control.Stage.for_out
    sf = _point()
    rows: dict[str, list[dict[str, Any]]] = {"direct": [], "staged": []}
    for i in range(args.runs * 2):
        mode = ("direct", "staged")[i % 2]
        control.Stage.for_out = for_out if mode == "staged" else (lambda *_a, **_k: None)  # type: ignore[method-assign]
        try:
            (res,) = run_file(sf, args.out / f"{i:02d}-{mode}", machine=here(os.environ))
        finally:
            control.Stage.for_out = for_out  # type: ignore[method-assign]
        fig = _figures(res.path)
        rows[mode].append(fig)
        print(
            f"{mode:6s} run {i // 2 + 1}: sampler {fig['rate']:.2f} of target, longest gap {fig['gap_ms']:.0f} ms, "
            f"late ticks {fig['late']}, faithful {fig['faithful']} {fig['failed'] or ''}, staged {fig['staged']}"
            f"  ({res.path})",
            flush=True,
        )
    for mode, figs in rows.items():
        rates, gaps = [f["rate"] for f in figs], [f["gap_ms"] for f in figs]
        print(
            f"{mode}: rate median {statistics.median(rates):.2f} worst {min(rates):.2f}; longest gap median "
            f"{statistics.median(gaps):.0f} ms worst {max(gaps):.0f} ms; faithful "
            f"{sum(bool(f['faithful']) for f in figs)}/{len(figs)}"
        )
    return 0


if __name__ == "__main__":
    enter(os.environ)  # this program's own entry: where its fabrics' run lock is
    sys.exit(main())
