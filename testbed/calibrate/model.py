"""The CPU cost model's coefficients: what ``testbed calibrate`` measures on this machine (``CostModel``) and the
built-in ones used without a calibration (``FALLBACK``).

A coefficient is core-seconds: forwarding per packet per veth crossed (a fixed part and a per-byte part), and the
queue sampler per tick, per namespace per tick and per row written. What flows and the sampler cost under them is
the plan's prediction (``testbed.plan.model``); the calibration's record and cache hold the coefficients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Built-in coefficients, used when this machine has no calibration. Forwarding: fitted once to the 8-flow ring on
# a 2x4x2 fabric (`testbed bench`, figure a, CPU from /proc/stat ticks, no sampler). The queue sampler: what
# `testbed calibrate` measured on the development machines (Linux 6.18, 2 x AMD EPYC).
COST_PER_PACKET_S = 1.08e-5  # core-seconds per packet per veth crossed (fixed part)
COST_PER_BYTE_S = 4.0e-10  # core-seconds per byte per veth crossed
SAMPLER_PER_TICK_S = 1.1e-4  # core-seconds per sampler tick (the loop, the link and CPU reads it makes)
SAMPLER_PER_NETNS_S = 1.8e-5  # core-seconds per namespace per tick (one RTM_GETQDISC dump)
SAMPLER_PER_ROW_S = 1.4e-5  # core-seconds per row written (queues.csv, links.csv)

# What a refusal says of the built-in constants: an estimate, not this machine's calibration, and why
NOT_CALIBRATED = "built-in estimate: this machine is not calibrated, run `sudo testbed calibrate`"
STALE = "built-in estimate: the cached calibration is of another kernel or CPU, run `sudo testbed calibrate`"


@dataclass(frozen=True)
class CostModel:
    """CPU cost coefficients, in core-seconds: forwarding per veth crossing, and the queue sampler."""

    per_crossing_s: float = COST_PER_PACKET_S
    per_byte_s: float = COST_PER_BYTE_S
    sampler_per_tick_s: float = SAMPLER_PER_TICK_S
    sampler_per_netns_s: float = SAMPLER_PER_NETNS_S
    sampler_per_row_s: float = SAMPLER_PER_ROW_S
    calibrated: bool = False
    source: str = NOT_CALIBRATED

    def crossing_cost(self, frame_bytes: float) -> float:
        """Core-seconds for one packet of ``frame_bytes`` to cross one veth."""
        return self.per_crossing_s + self.per_byte_s * frame_bytes

    def describe(self) -> dict[str, Any]:
        return {
            "per_crossing_s": self.per_crossing_s,
            "per_byte_s": self.per_byte_s,
            "sampler_per_tick_s": self.sampler_per_tick_s,
            "sampler_per_netns_s": self.sampler_per_netns_s,
            "sampler_per_row_s": self.sampler_per_row_s,
            "calibrated": self.calibrated,
            "source": self.source,
        }


FALLBACK = CostModel()
