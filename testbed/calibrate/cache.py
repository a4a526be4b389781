"""The calibration cache: one JSON file per machine, used while the kernel, CPU count and CPU model match
(``load_matching``), and its status as doctor and the capabilities record show it.

Nothing calibrates on its own: a run without a calibration uses the built-in constants and says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from testbed.calibrate.model import FALLBACK, STALE, CostModel
from testbed.calibrate.record import Calibration, Machine

CACHE = Path("/var/lib/testbed/calibration.json")


def save(cal: Calibration, path: Path = CACHE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cal.to_dict(), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load(path: Path = CACHE) -> Calibration | None:
    """The cached calibration, or None when there is none or it cannot be read."""
    try:
        return Calibration.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def load_matching(path: Path = CACHE, machine: Machine | None = None) -> Calibration | None:
    """The cached calibration if it was measured on this kernel, CPU count and CPU model; else None."""
    cal = load(path)
    if cal is None or not cal.matches(machine or Machine.here()):
        return None
    return cal


def current_model(path: Path = CACHE, machine: Machine | None = None) -> CostModel:
    """This machine's calibrated cost model (the cache, when it matches this machine), else ``FALLBACK``, whose
    ``source`` says whether there is no calibration or a stale one."""
    cal = load(path)
    if cal is None:
        return FALLBACK
    return cal.model if cal.matches(machine or Machine.here()) else replace(FALLBACK, source=STALE)


def status(path: Path = CACHE, machine: Machine | None = None) -> dict[str, Any]:
    """What doctor and the capabilities record say: ``calibrated`` (with the summary), ``stale`` (measured on
    another kernel or CPU), or ``not calibrated``."""
    cal = load(path)
    here = machine or Machine.here()
    if cal is None:
        return {"status": "not calibrated", "path": str(path)}
    if not cal.matches(here):
        return {"status": "stale", "path": str(path), **cal.summary()}
    return {"status": "calibrated", "path": str(path), **cal.summary()}


def describe_status(st: dict[str, Any]) -> tuple[str, str, str]:
    """(status, what it means, what to do) for doctor's table."""
    if st.get("status") == "calibrated":
        values = (
            f"{st['per_crossing_s'] * 1e6:.2f} us/packet/veth + {st['per_byte_s'] * 1e9:.3f} ns/byte; sampler "
            f"{st['sampler_per_tick_s'] * 1e6:.0f} us/tick + {st['sampler_per_netns_s'] * 1e6:.1f} us/namespace/tick + "
            f"{st['sampler_per_row_s'] * 1e6:.1f} us/row"
        )
        return f"yes ({st['date'][:10]}, rev {st['revision']})", values, ""
    if st.get("status") == "stale":
        m = st.get("machine") or {}
        return (
            "STALE",
            f"measured on {m.get('kernel')} / {m.get('cpus')} x {m.get('cpu_model')}: the preflight uses built-in "
            "constants",
            "run `sudo testbed calibrate`",
        )
    return (
        "not calibrated: run testbed calibrate",
        "the preflight's CPU estimate uses built-in constants (uncalibrated)",
        "run `sudo testbed calibrate` (about 40 s)",
    )
