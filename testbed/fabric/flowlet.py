"""Flowlet switching's BPF attachments for one run (``ecmp.mode: flowlet``): load, configure, attach, read, detach.

One program instance (testbed/ecn/bpf/flowlet.bpf.c) per router port that is no ECMP next hop, at its clsact
ingress, pinned under ``/sys/fs/bpf/<prefix>/flowlet/<netns>__<dev>/`` so that `testbed clean` finds what a dead
run left. Each sets the mark that picks a way table (testbed.fabric.routing's spraying tables). The programs of
one node share its round-robin turn (the first one's ``turn`` map): each port's own turn would start every flow
of a leaf on the same way, as the first try here did (aggregate 0.37 of ideal, one spine idle).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from testbed.ecn import bpfsys
from testbed.ecn.errors import EcnError
from testbed.ecn.sysrun import BPFFS, ensure_bpffs, run, tool

CFG = struct.Struct("<QII")  # gap_ns, ways, random (struct flowlet_cfg)
STATS_FIELDS = ("packets", "flowlets", "switches", "min_gap_new_ns", "max_gap_kept_ns")  # struct flowlet_stats
STATS = struct.Struct("<" + "Q" * len(STATS_FIELDS))


@dataclass
class _Port:
    netns: str
    dev: str
    pin_dir: Path
    stats_fd: int = -1
    clsact_ours: bool = False


def combine(per_cpu: list[dict[str, int]]) -> dict[str, int]:
    """One port's counters over its CPUs: sums, the smallest nonzero ``min_gap_new_ns`` and the largest
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
        self._ports: dict[tuple[str, str], _Port] = {}
        self._turns: dict[str, Path] = {}  # netns -> the turn map its programs share
        self._ncpu = bpfsys.possible_cpus()

    def attach(self, netns: str, dev: str, gap_s: float, ways: int, random: bool) -> None:
        if not self.obj.exists():
            raise EcnError(f"{self.obj} is missing: build it with `python3 -m testbed.ecn.build`")
        ensure_bpffs()
        pin_dir = self.root / f"{netns}__{dev}"
        pin_dir.mkdir(parents=True, exist_ok=False)
        port = self._ports[(netns, dev)] = _Port(netns, dev, pin_dir)
        try:
            load = [tool("bpftool"), "prog", "load", str(self.obj), str(pin_dir / "prog"), "type", "classifier"]
            shared = ["map", "name", "turn", "pinned", str(self._turns[netns])] if netns in self._turns else []
            res = run([*load, *shared, "pinmaps", str(pin_dir)], check=False)
            if res.returncode != 0:
                raise EcnError(f"loading the flowlet program for {netns}/{dev} failed:\n{res.stderr.strip()[-1200:]}")
            cfg_fd = bpfsys.obj_get(pin_dir / "cfg")
            try:
                bpfsys.update(cfg_fd, 0, CFG.pack(round(gap_s * 1e9), ways, int(random)))
            finally:
                os.close(cfg_fd)
            port.stats_fd = bpfsys.obj_get(pin_dir / "stats")
            self._turns.setdefault(netns, pin_dir / "turn")
            if not self._has_clsact(netns, dev):
                run(["tc", "qdisc", "add", "dev", dev, "clsact"], netns)
                port.clsact_ours = True
            filt = ["tc", "filter", "add", "dev", dev, "ingress", "prio", "1", "handle", "1", "bpf", "da"]
            run([*filt, "pinned", str(pin_dir / "prog")], netns)
        except BaseException:
            self._detach(port)
            raise

    @staticmethod
    def _has_clsact(netns: str, dev: str) -> bool:
        out = run(["tc", "-j", "qdisc", "show", "dev", dev], netns).stdout
        return any(q.get("kind") == "clsact" for q in json.loads(out or "[]"))

    def read(self) -> dict[tuple[str, str], dict[str, int]]:
        """(netns, dev) -> its counters (``combine``)."""
        stride = (STATS.size + 7) // 8 * 8
        out = {}
        for key, port in self._ports.items():
            raw = bpfsys.lookup(port.stats_fd, 0, stride * self._ncpu)
            cpus = [dict(zip(STATS_FIELDS, STATS.unpack_from(raw, i * stride), strict=True)) for i in range(self._ncpu)]
            out[key] = combine(cpus)
        return out

    def _detach(self, port: _Port) -> None:
        if Path("/run/netns", port.netns).exists():
            if port.clsact_ours:
                run(["tc", "qdisc", "del", "dev", port.dev, "clsact"], port.netns, check=False)
            else:
                run(["tc", "filter", "del", "dev", port.dev, "ingress", "prio", "1"], port.netns, check=False)
        if port.stats_fd >= 0:
            os.close(port.stats_fd)
            port.stats_fd = -1
        shutil.rmtree(port.pin_dir, ignore_errors=True)
        self._ports.pop((port.netns, port.dev), None)

    def close(self) -> None:
        for port in list(self._ports.values()):
            self._detach(port)
        if self.root.exists() and not any(self.root.iterdir()):
            self.root.rmdir()
        if self.root.parent.exists() and not any(self.root.parent.iterdir()):
            self.root.parent.rmdir()
