"""Flow placement as a controlled factor: every flow's source port is chosen by the harness, not the kernel.

Which spine (or core) a flow crosses is a function of its 5-tuple under static ECMP hashing. With ephemeral source
ports the kernel draws that 5-tuple anew in every run, so two variants of a sweep differ in their setting and in
where their flows went at once. Here a flow's source port is a pure function of the placement seed, the job and
the flow's own key: every variant of a sweep point gets the same placement in the same repeat (the seed is the
scenario's seed and the repeat index, never the variant), and each repeat draws a new one (testbed.spec.placement:
the modes, the port ranges).

Placed ports come from ``PLACED_PORTS``; each host namespace's ``net.ipv4.ip_local_port_range`` is set to
``EPHEMERAL`` so that a port the kernel picks for an unplaced socket (a control connection) never takes a placed
one, and every listener of the harness sits below both ranges.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from testbed.errors import TestbedError
from testbed.spec.placement import EPHEMERAL, PLACED_PORTS, placement_seed

__all__ = ["EPHEMERAL", "PLACED_PORTS", "PlacementError", "SourcePorts", "placement_seed"]


class PlacementError(TestbedError, ValueError):
    """A flow that cannot be given a source port (every placed port of its host taken, a fixed port twice)."""


@dataclass
class SourcePorts:
    """Source ports for one run: ``sport(host, job, flow)`` is the same for the same seed, job and flow key.

    The first pick is a hash of (seed, job, flow); a port already given on the same host moves to the next free
    one, in call order (generators start in workload order, so the order is the same in every variant). A flow key
    asked for twice gets a second port: a port is never bound by two flows of one host in one run.
    ``seed`` None: the kernel picks (placement mode ``kernel``): ``sport`` returns 0, which a socket binds as "any
    port", and nothing is listed. ``reserved``: host -> ports the scenario itself fixed (an iperf3 job's
    ``cport``), never placed. ``assigned`` lists every choice as (host, job, flow, sport), the record's placement
    table (``rows()``).
    """

    seed: int | None = 0
    reserved: Mapping[str, frozenset[int]] = field(default_factory=dict)
    assigned: list[tuple[str, str, str, int]] = field(default_factory=list)
    _taken: dict[str, set[int]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def placed(self) -> bool:
        return self.seed is not None

    def _start(self, job: str, flow: str) -> int:
        digest = hashlib.blake2b(f"{self.seed}/{job}/{flow}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") % len(PLACED_PORTS)

    def _busy(self, host: str) -> set[int]:
        if host not in self._taken:
            self._taken[host] = set(self.reserved.get(host, ()))
        return self._taken[host]

    def sport(self, host: str, job: str, flow: str) -> int:
        """The source port of ``job``'s flow ``flow`` from ``host`` (0: the kernel's choice)."""
        return self.block(host, job, [flow])[0]

    def block(self, host: str, job: str, flows: Sequence[str]) -> list[int]:
        """Consecutive source ports for ``flows`` (a tool that binds port, port + 1, ...: iperf3's ``--cport`` with
        parallel streams); the block starts at the first flow's pick, or the next place where all are free."""
        if not self.placed:
            return [0] * len(flows)
        n, c = len(PLACED_PORTS), len(flows)
        with self._lock:
            taken = self._busy(host)
            k = self._start(job, flows[0]) % (n - c + 1)
            for _ in range(n):
                ports = [PLACED_PORTS[k + i] for i in range(c)]
                if not taken.intersection(ports):
                    break
                k = (k + 1) % (n - c + 1)
            else:
                raise PlacementError(
                    f"job {job}: host {host} has no {c} free placed source port(s) left of {n} "
                    "(fewer flows, or placement: {mode: kernel})"
                )
            taken.update(ports)
            self.assigned += [(host, job, fl, p) for fl, p in zip(flows, ports, strict=True)]
        return ports

    def reserve(self, more: Mapping[str, frozenset[int]]) -> None:
        """Also keep these ports (host -> ports a later scenario fixes) out of the placed ones."""
        with self._lock:
            self.reserved = {
                h: frozenset(self.reserved.get(h, ())) | more.get(h, frozenset()) for h in {*self.reserved, *more}
            }
            for h, ports in more.items():
                self._busy(h).update(ports)

    def claim(self, host: str, job: str, flow: str, port: int) -> int:
        """List a port the scenario fixed (not chosen here); it must be in ``reserved`` or free on ``host``."""
        with self._lock:
            taken = self._busy(host)
            if port in taken and port not in self.reserved.get(host, ()):
                raise PlacementError(f"job {job}: host {host} port {port} is taken by another flow")
            taken.add(port)
            self.assigned.append((host, job, flow, port))
        return port

    def rows(self) -> list[dict[str, Any]]:
        """placement.csv: one row per flow given a port, in the order they were given."""
        return [{"host": h, "job": j, "flow": fl, "sport": p} for h, j, fl, p in self.assigned]
