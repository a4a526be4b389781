"""Flowlet switching's and adaptive routing's BPF programs for one run (``ecmp.mode: flowlet`` or ``adaptive``):
load, configure, attach, read, detach.

One instance of testbed/bpf/src/flowlet.bpf.c per ECMP router, loaded with ``bpftool prog loadall`` so that its
two programs share its maps: ``flowlet`` at the clsact ingress of every port that is no ECMP next hop, and (for
adaptive routing) ``uplink`` at the clsact egress of every ECMP next hop, before any ECN marker there. Pinned under
``/sys/fs/bpf/<prefix>/flowlet/<netns>/`` so that `testbed clean` finds what a dead run left. One instance per
node, not per port: the node's ports share its round-robin turn and flow table (with a turn per port, every flow of
a leaf starts on the same way and the other spines idle; docs/bench.md, "Flowlet switching's turn").
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from testbed.bpf import bpfsys
from testbed.bpf.errors import BpfError
from testbed.bpf.sysrun import BPFFS, detach_tc, ensure_bpffs, remove_empty, run, tool, unpin

CFG = struct.Struct("<QII")  # gap_ns, ways, pick (struct flowlet_cfg)
PICKS = {"round-robin": 0, "random": 1, "least-queued": 2}
MAX_WAYS = 16  # the program's MAX_WAYS
STATS_FIELDS = ("packets", "flowlets", "switches", "min_gap_new_ns", "max_gap_kept_ns")  # struct flowlet_stats
STATS = struct.Struct("<" + "Q" * len(STATS_FIELDS))


class FlowletError(BpfError):
    """A flowlet or adaptive-routing program that cannot be loaded, configured or attached here."""


@dataclass
class _Node:
    netns: str
    pin_dir: Path
    stats_fd: int = -1
    devs: list[tuple[str, str, bool]] = field(default_factory=list)  # (dev, ingress|egress, clsact ours)


def combine(per_cpu: list[dict[str, int]]) -> dict[str, int]:
    """One node's counters over its CPUs: sums, the smallest nonzero ``min_gap_new_ns`` and the largest
    ``max_gap_kept_ns``."""
    out = {k: sum(c[k] for c in per_cpu) for k in ("packets", "flowlets", "switches")}
    starts = [c["min_gap_new_ns"] for c in per_cpu if c["min_gap_new_ns"]]
    out["min_gap_new_ns"] = min(starts) if starts else 0
    out["max_gap_kept_ns"] = max((c["max_gap_kept_ns"] for c in per_cpu), default=0)
    return out


class FlowletSet:
    """Owns every flowlet program of one run. ``close`` undoes all of them (idempotent)."""

    def __init__(self, prefix: str, build_dir: Path):
        self.obj = Path(build_dir) / "flowlet.bpf.o"
        self.root = BPFFS / prefix / "flowlet"
        self._nodes: dict[str, _Node] = {}
        self._ncpu = bpfsys.possible_cpus()

    def attach(self, netns: str, downlinks: list[str], uplinks: list[str], gap_s: float, ways: int, pick: str) -> None:
        """Load the node's instance, configure it, and attach ``flowlet`` to its downlinks; with ``pick``
        least-queued also ``uplink`` to its uplinks."""
        if not self.obj.exists():
            raise FlowletError(f"{self.obj} is missing: build it with `python3 -m testbed.bpf.build`")
        if ways > MAX_WAYS:
            raise FlowletError(f"{netns}: {ways} ways, the flowlet program handles at most {MAX_WAYS}")
        ensure_bpffs()
        pin_dir = self.root / netns
        (pin_dir / "maps").mkdir(parents=True, exist_ok=False)
        node = self._nodes[netns] = _Node(netns, pin_dir)
        try:
            load = [tool("bpftool"), "prog", "loadall", str(self.obj), str(pin_dir / "progs"), "type", "classifier"]
            res = run([*load, "pinmaps", str(pin_dir / "maps")], check=False)
            if res.returncode != 0:
                raise FlowletError(f"loading the flowlet program for {netns} failed:\n{res.stderr.strip()[-1200:]}")
            cfg_fd = bpfsys.obj_get(pin_dir / "maps" / "cfg")
            try:
                bpfsys.update(cfg_fd, 0, CFG.pack(round(gap_s * 1e9), ways, PICKS[pick]))
            finally:
                os.close(cfg_fd)
            node.stats_fd = bpfsys.obj_get(pin_dir / "maps" / "stats")
            for dev in downlinks:
                self._filter(node, dev, "ingress", "flowlet")
            if pick == "least-queued":
                for dev in uplinks:
                    self._filter(node, dev, "egress", "uplink")
        except BaseException:
            self._detach(node)
            raise

    def _filter(self, node: _Node, dev: str, hook: str, prog: str) -> None:
        ours = not self._has_clsact(node.netns, dev)
        if ours:
            run(["tc", "qdisc", "add", "dev", dev, "clsact"], node.netns)
        node.devs.append((dev, hook, ours))
        filt = ["tc", "filter", "add", "dev", dev, hook, "prio", "1", "handle", "1", "bpf", "da"]
        run([*filt, "pinned", str(node.pin_dir / "progs" / prog)], node.netns)

    @staticmethod
    def _has_clsact(netns: str, dev: str) -> bool:
        out = run(["tc", "-j", "qdisc", "show", "dev", dev], netns).stdout
        return any(q.get("kind") == "clsact" for q in json.loads(out or "[]"))

    def read(self) -> dict[str, dict[str, int]]:
        """netns -> its node's counters (``combine``)."""
        stride = (STATS.size + 7) // 8 * 8
        out = {}
        for netns, node in self._nodes.items():
            raw = bpfsys.lookup(node.stats_fd, 0, stride * self._ncpu)
            cpus = [dict(zip(STATS_FIELDS, STATS.unpack_from(raw, i * stride), strict=True)) for i in range(self._ncpu)]
            out[netns] = combine(cpus)
        return out

    def _detach(self, node: _Node) -> None:
        for dev, hook, ours in node.devs:
            detach_tc(node.netns, dev, hook, "1", ours)
        node.stats_fd = unpin(node.stats_fd, node.pin_dir)
        self._nodes.pop(node.netns, None)

    def close(self) -> None:
        for node in list(self._nodes.values()):
            self._detach(node)
        remove_empty(self.root, self.root.parent)
