"""Every point's predicted CPU load against the budget, without building anything (``testbed calibrate
--predict``): one row per point of each scenario file, from this machine's cost model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed.calibrate.model import CostModel
from testbed.host.machine import Machine
from testbed.plan.budget import check_budget
from testbed.plan.labels import variant_text
from testbed.spec.scenario import load_scenario_file


def predict_rows(paths: Sequence[str], machine: Machine, model: CostModel) -> list[dict[str, Any]]:
    """Every point of every scenario file: its predicted load against the budget (with ``model``, this machine's
    cost model), each point on the address plan its file drew."""
    out = []
    for path in paths:
        sf = load_scenario_file(path)
        for point in sf.points:
            v = check_budget(point, machine.caps, model, env=machine.env, topo=point.topology())
            e = v.estimate
            out.append(
                {
                    "file": Path(path).name,
                    "point": variant_text(point) or "-",
                    "kernel": point.kernel,
                    "mtu": point.fabric.mtu,
                    "rate_mbit": point.fabric.host_link.rate_bps / 1e6,
                    "flows": e.flows,
                    "forwarding": e.load,
                    "sampler": e.sampler_load,
                    "total": e.total,
                    "peak": e.peak,
                    "budget": v.budget,
                    "fits": v.fits,
                    "max_rate_mbit": None if v.max_rate_bps is None else v.max_rate_bps / 1e6,
                    "calibrated": model.calibrated,
                }
            )
    return out


def format_predictions(rows: list[dict[str, Any]]) -> str:
    head = ("scenario", "point", "MTU", "Mbit/s", "flows", "fwd", "sampler", "total", "peak", "verdict")
    table = [head]
    for r in rows:
        verdict = (
            "fits" if r["fits"] else f"REFUSED (max {r['max_rate_mbit']:g} Mbit/s)" if r["max_rate_mbit"] else "REFUSED"
        )
        if r["kernel"] == "stock":
            verdict += " (guest kernel: not this calibration)"
        table.append(
            (
                r["file"],
                r["point"][:60],
                str(r["mtu"]),
                f"{r['rate_mbit']:g}",
                str(r["flows"]),
                f"{r['forwarding']:.0%}",
                f"{r['sampler']:.0%}",
                f"{r['total']:.0%}",
                f"{r['peak']:.0%}",
                verdict,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)
