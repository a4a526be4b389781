"""What a calibration is: the machine it holds for, the measured windows and the fitted coefficients
(``Calibration``, serialised as the cache's JSON), with the code's revision it was measured with.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.calibrate.model import CostModel
from testbed.entry import git_commit
from testbed.errors import TestbedError

FORMAT = 1
REPO = Path(__file__).resolve().parents[2]


class CalibrationError(TestbedError, RuntimeError):
    """The calibration could not measure (a flow did not run, nothing to fit); nothing is cached."""


@dataclass(frozen=True)
class Machine:
    """What a calibration is valid for: the same kernel, CPU count and CPU model."""

    kernel: str
    cpus: int
    cpu_model: str

    @classmethod
    def here(cls) -> Machine:
        return cls(platform.release(), os.cpu_count() or 1, cpu_model())


def cpu_model(cpuinfo: str | None = None) -> str:
    """The ``model name`` of /proc/cpuinfo (first CPU), or "unknown CPU"."""
    try:
        text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    except OSError:
        return "unknown CPU"
    for line in text.splitlines():
        if line.startswith("model name"):
            return " ".join(line.split(":", 1)[1].split())
    return "unknown CPU"


def git_revision(repo: Path = REPO) -> str:
    """The code's commit (short), with ``+dirty`` when the work tree differs from it; "unknown" outside git."""
    return git_commit(repo) or "unknown"


@dataclass(frozen=True)
class ForwardingSample:
    """One traffic window: its CPU, what came off it, and the veth crossings it caused."""

    mtu: int
    rate_bps: float
    wall_s: float
    busy_core_s: float  # cores x wall - (idle + iowait + steal)
    foreign_core_s: float  # other processes' CPU
    baseline_core_s: float  # the idle fabric's, for this window's length
    sampler_core_s: float  # the queue sampler's own CPU in the window
    crossings: int  # packets x veths (sum of every interface's tx_packets)
    bytes: int  # bytes x veths
    endpoint_packets: int  # packets the hosts sent (data and ACKs)
    with_sampler: bool = True  # the queue sampler ran, as in a run (its own CPU is ``sampler_core_s``)

    @property
    def forwarding_core_s(self) -> float:
        return self.busy_core_s - self.foreign_core_s - self.baseline_core_s - self.sampler_core_s

    @property
    def veths_per_packet(self) -> float:
        return self.crossings / self.endpoint_packets if self.endpoint_packets else 0.0


@dataclass(frozen=True)
class SamplerSample:
    """One sampler lifetime: its CPU (rusage) over its ticks, namespaces and rows."""

    namespaces: int
    ticks: float
    rows: int
    cpu_s: float
    duration_s: float
    traffic: bool
    machine_core_s: float = 0.0  # idle windows: the machine's busy time above the idle fabric's, sampler included
    window_s: float = 0.0


@dataclass(frozen=True)
class Calibration:
    """A measured ``CostModel`` with where, when and how it was measured."""

    machine: Machine
    date: str  # ISO 8601, UTC
    revision: str
    per_crossing_s: float
    per_byte_s: float
    sampler_per_tick_s: float
    sampler_per_netns_s: float
    sampler_per_row_s: float
    duration_s: float = 0.0
    idle_cores: float = 0.0  # the idle fabric's baseline (cores busy)
    forwarding: tuple[ForwardingSample, ...] = ()
    sampler: tuple[SamplerSample, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def model(self) -> CostModel:
        return CostModel(
            self.per_crossing_s,
            self.per_byte_s,
            self.sampler_per_tick_s,
            self.sampler_per_netns_s,
            self.sampler_per_row_s,
            calibrated=True,
            source=f"calibrated {self.date[:10]} (rev {self.revision}) on {self.machine.kernel}",
        )

    def matches(self, machine: Machine) -> bool:
        return self.machine == machine

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["format"] = FORMAT
        d["forwarding"] = [
            {**asdict(s), "forwarding_core_s": s.forwarding_core_s, "veths_per_packet": s.veths_per_packet}
            for s in self.forwarding
        ]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        if d.get("format") != FORMAT:
            raise ValueError(f"calibration format {d.get('format')!r}, expected {FORMAT}")
        fwd_keys = {f for f in ForwardingSample.__dataclass_fields__}
        return cls(
            machine=Machine(**d["machine"]),
            date=str(d["date"]),
            revision=str(d["revision"]),
            per_crossing_s=float(d["per_crossing_s"]),
            per_byte_s=float(d["per_byte_s"]),
            sampler_per_tick_s=float(d["sampler_per_tick_s"]),
            sampler_per_netns_s=float(d["sampler_per_netns_s"]),
            sampler_per_row_s=float(d["sampler_per_row_s"]),
            duration_s=float(d.get("duration_s", 0.0)),
            idle_cores=float(d.get("idle_cores", 0.0)),
            forwarding=tuple(
                ForwardingSample(**{k: v for k, v in s.items() if k in fwd_keys}) for s in d.get("forwarding", [])
            ),
            sampler=tuple(SamplerSample(**s) for s in d.get("sampler", [])),
            notes=tuple(d.get("notes", [])),
        )

    def summary(self) -> dict[str, Any]:
        """The calibration in brief (values, date, revision, machine), as doctor and the manifest show it."""
        return {
            "date": self.date,
            "revision": self.revision,
            "machine": asdict(self.machine),
            "per_crossing_s": self.per_crossing_s,
            "per_byte_s": self.per_byte_s,
            "sampler_per_tick_s": self.sampler_per_tick_s,
            "sampler_per_netns_s": self.sampler_per_netns_s,
            "sampler_per_row_s": self.sampler_per_row_s,
            "notes": list(self.notes),
        }
