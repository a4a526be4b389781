"""Which machines the compared runs ran on, and whether their calibrations differ (a caveat for the reading).

A run's CPU cost model (manifest ``preflight.model``: the calibrated coefficients, or the built-in constants) decides
which points its preflight accepted and at what rate; points measured on machines calibrated differently (a cluster's
workers, or one machine before and after a recalibration) are still comparable as measurements, but the reader
should know. A record run on a cluster worker names it under ``worker``; a local one under ``hostname``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

COEFFICIENTS = ("per_crossing_s", "per_byte_s", "sampler_per_tick_s", "sampler_per_netns_s", "sampler_per_row_s")


def machine(manifest: dict[str, Any]) -> str:
    worker = manifest.get("worker") or {}
    return str(worker.get("host") or manifest.get("hostname") or "unknown")


def calibration_key(manifest: dict[str, Any]) -> tuple[Any, ...] | None:
    """The run's cost model, as a comparable tuple (None when the record has none: a run refused or too old)."""
    model = (manifest.get("preflight") or {}).get("model")
    if not isinstance(model, dict):
        return None
    return (bool(model.get("calibrated")), *(model.get(k) for k in COEFFICIENTS))


def _describe(key: tuple[Any, ...]) -> str:
    if not key[0]:
        return "uncalibrated (built-in constants)"
    return f"{key[1] * 1e6:.2f} us/packet/veth + {key[2] * 1e9:.3f} ns/byte"


def calibration_caveat(manifests: Iterable[dict[str, Any]]) -> str | None:
    """One sentence when the runs' machines were calibrated differently, naming each machine and its calibration."""
    seen: dict[tuple[Any, ...], set[str]] = {}
    for m in manifests:
        key = calibration_key(m)
        if key is not None:
            seen.setdefault(key, set()).add(machine(m))
    if len(seen) < 2:
        return None
    parts = "; ".join(f"{', '.join(sorted(hosts))}: {_describe(key)}" for key, hosts in seen.items())
    return (
        f"These runs ran on machines with {len(seen)} different calibrations ({parts}): "
        "a point's preflight and fidelity margins depend on its machine's."
    )
