"""Flow placement (a scenario's ``placement:``): who picks every flow's source port, and so, under static ECMP
hashing on the 5-tuple, which spine or core each flow crosses.

::

    placement: {mode: per-repeat}   # the default; or fixed, or kernel

- ``per-repeat``: the harness picks every port from a seed of the scenario's ``seed`` and the repeat index (never
  the variant): every variant of a sweep point takes the same placement in the same repeat, each repeat a new one.
  A comparison then changes its setting only, and the repeats sample placements.
- ``fixed``: one placement (repeat 0's) for every repeat: the repeats differ in timing only.
- ``kernel``: the kernel picks ephemeral ports, as an unplaced socket does: placement is not controlled.

Placed ports come from ``PLACED_PORTS``; every host namespace's ``net.ipv4.ip_local_port_range`` is ``EPHEMERAL``
(testbed.fabric.build), so a port the kernel picks (a control connection, ``kernel`` mode) never takes a placed one,
and every listener of the harness sits below both (a job's server ports: iperf3 5201 + its index, the probe's echo
7000 + 10 x index, short flows 9000 + 10 x index and the next, the rank workers 20000 + 10 x index and the next).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from testbed.spec import fields as f
from testbed.spec.fields import SpecError
from testbed.spec.workload import IperfJob, ShortFlowsJob

PLACED_PORTS = range(32768, 49152)
EPHEMERAL = (49152, 65535)
MODES = ("per-repeat", "fixed", "kernel")


def placement_seed(seed: int, repeat_index: int) -> int:
    """The placement seed of a run: the scenario's seed and the repeat, never the variant (0..2**31-1)."""
    digest = hashlib.blake2b(f"placement/{seed}/{repeat_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (2**31)


@dataclass(frozen=True)
class PlacementSpec:
    """How every flow's source port is chosen (module docstring): ``mode`` per-repeat, fixed or kernel."""

    mode: str = f.spec_field(
        "per-repeat",
        f.one_of(*MODES),
        doc="who picks flows' source ports: per-repeat (a placement per repeat), fixed (one for every run) or kernel",
    )

    @classmethod
    def from_dict(cls, data: Any, path: str) -> PlacementSpec:
        return cls(**f.read_fields(cls, data, path))

    def seed(self, scenario_seed: int, repeat_index: int) -> int | None:
        """The run's placement seed; None when the kernel picks the ports."""
        if self.mode == "kernel":
            return None
        return placement_seed(scenario_seed, repeat_index if self.mode == "per-repeat" else 0)

    def manifest(self, scenario_seed: int, repeat_index: int) -> dict[str, Any]:
        """The manifest's ``placement``: the mode and the seed the ports were drawn from (null: the kernel's)."""
        return {"mode": self.mode, "seed": self.seed(scenario_seed, repeat_index)}


def ports_needed(workload: Iterable[Any]) -> Counter[str]:
    """Host -> the placed source ports the jobs that open many connections take there: every iperf3 stream of every
    on/off cycle (unless the job fixes ``cport``), every short flow and incast flow (each its own port)."""
    need: Counter[str] = Counter()
    for job in workload:
        if isinstance(job, IperfJob) and job.cport is None:
            need[job.src] += iperf_cycles(job) * job.parallel
        elif isinstance(job, ShortFlowsJob):
            for host in job.senders:
                need[host] += job.count
    return need


def iperf_cycles(job: IperfJob) -> int:
    """How many iperf3 clients an iperf job runs one after the other (1, or its on/off cycles)."""
    if job.on is None or job.off is None:
        return 1
    return max(1, math.floor((job.duration + job.off) / (job.on + job.off)))


def check_capacity(placement: PlacementSpec, workload: Iterable[Any], path: str = "placement") -> None:
    """Refuse a workload whose flows need more placed ports on one host than there are (one line)."""
    if placement.mode == "kernel":
        return
    need = ports_needed(workload)
    host, most = max(need.items(), key=lambda kv: kv[1], default=("", 0))
    if most > len(PLACED_PORTS):
        raise SpecError(
            path,
            f"host {host} opens {most:,} connections, more than the {len(PLACED_PORTS):,} placed source ports: "
            "fewer flows, or placement: {mode: kernel}",
        )
