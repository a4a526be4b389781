"""Flow placement as a controlled factor: every flow's source port is chosen by the harness, not the kernel.

Which spine (or core) a flow crosses is a function of its 5-tuple under static ECMP hashing. With ephemeral source
ports the kernel draws that 5-tuple anew in every run, so two variants of a sweep differ in their setting and in
where their flows went at once. Here a flow's source port is a pure function of the placement seed, the job and
the flow's own key: every variant of a sweep point gets the same placement in the same repeat (the seed is the
scenario's seed and the repeat index, never the variant), and each repeat draws a new one.

Placed ports come from ``PLACED_PORTS``; each host namespace's ``net.ipv4.ip_local_port_range`` is set to
``EPHEMERAL`` so that a port the kernel picks for an unplaced socket (a control connection) never takes a placed
one, and every listener of the harness sits below both ranges.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

PLACED_PORTS = range(32768, 49152)
EPHEMERAL = (49152, 65535)


def placement_seed(seed: int, repeat_index: int) -> int:
    """The placement seed of a run: the scenario's seed and the repeat, never the variant (0..2**31-1)."""
    digest = hashlib.blake2b(f"placement/{seed}/{repeat_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (2**31)


@dataclass
class SourcePorts:
    """Source ports for one run: ``sport(host, job, flow)`` is the same for the same seed, job and flow key.

    The first pick is a hash of (seed, job, flow); a port already given on the same host moves to the next free
    one, in call order (generators start in workload order, so the order is the same in every variant).
    ``assigned`` lists every choice as (host, job, flow, sport), the record's placement table.
    """

    seed: int
    assigned: list[tuple[str, str, str, int]] = field(default_factory=list)
    _taken: dict[str, set[int]] = field(default_factory=dict)

    def sport(self, host: str, job: str, flow: str) -> int:
        digest = hashlib.blake2b(f"{self.seed}/{job}/{flow}".encode(), digest_size=8).digest()
        n = len(PLACED_PORTS)
        k = int.from_bytes(digest, "big") % n
        taken = self._taken.setdefault(host, set())
        if len(taken) >= n:
            raise ValueError(f"host {host}: all {n} placed source ports are taken")
        while PLACED_PORTS[k] in taken:
            k = (k + 1) % n
        port = PLACED_PORTS[k]
        taken.add(port)
        self.assigned.append((host, job, flow, port))
        return port
