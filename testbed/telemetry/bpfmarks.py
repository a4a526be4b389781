"""Marks counted by the project's eBPF marker (testbed/ecn/marker.py), read from its pinned per-CPU stats map.

The marker pins one ``stats`` map per port at ``/sys/fs/bpf/<prefix>/<netns>__<dev>/stats`` (``MarkerSet.pins()``
lists the directories); a PortRef names it as ``marks_map``. The layout (``struct marker_stats``, u64 fields, one
value per possible CPU) is taken from testbed.ecn.marker so that the two never disagree; this is what
``MarkerSet.read_marks`` sums, done here from the sampler's own process (MarkerSet lives in the harness).
"""

from __future__ import annotations

import os
from pathlib import Path


class BpfMarks:
    """Open pinned stats maps once; ``read(path)`` -> marks summed over CPUs."""

    def __init__(self, paths: list[str]):
        from testbed.bpf import bpfsys
        from testbed.ecn.marker import STATS, STATS_FIELDS

        self._lookup = bpfsys.lookup
        self._stats = STATS
        self._idx = STATS_FIELDS.index("marks")
        self._ncpu = bpfsys.possible_cpus()
        self._stride = (STATS.size + 7) // 8 * 8
        self.fds: dict[str, int] = {}
        try:
            for p in paths:
                self.fds[p] = bpfsys.obj_get(Path(p))
        except BaseException:
            self.close()
            raise

    def read(self, path: str) -> int:
        raw = self._lookup(self.fds[path], 0, self._stride * self._ncpu)
        unpack, idx, stride = self._stats.unpack_from, self._idx, self._stride
        return sum(unpack(raw, cpu * stride)[idx] for cpu in range(self._ncpu))

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def marks_map_path(prefix: str, netns: str, dev: str) -> str:
    """Where MarkerSet pins a port's stats map."""
    return f"/sys/fs/bpf/{prefix}/{netns}__{dev}/stats"
