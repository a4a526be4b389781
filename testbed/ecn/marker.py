"""The eBPF marker's attachments for one run: load, configure, attach, read counters, detach.

One program instance per port (its own config and per-CPU counter maps), pinned under
``/sys/fs/bpf/<prefix>/<netns>__<dev>/`` so that `testbed clean` can find what a dead run left.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.bpf import bpfsys
from testbed.bpf.sysrun import BPFFS, detach_tc, ensure_bpffs, remove_empty, run, tool, unpin
from testbed.ecn.errors import EcnError
from testbed.spec.classes import TrafficClass
from testbed.spec.link import LinkSpec, Marking

CFG = struct.Struct("<IIII")  # mode, low, high, pmax (struct marker_cfg)
STATS_FIELDS = ("marks", "ect_seen", "not_ect", "max_backlog", "unreadable")  # struct marker_stats, u64 each
STATS = struct.Struct("<" + "Q" * len(STATS_FIELDS))
MODES = {"off": 0, "step": 1, "ramp": 2}
# Root qdiscs that keep sch->qstats.backlog (the marker reads it); lockless ones (pfifo_fast, mq) do not.
BACKLOG_ROOTS = {"htb", "tbf", "bfifo", "pfifo", "hfsc", "prio", "drr", "qfq", "ets", "red"}
FILTER_PRIO = "2"  # after flowlet.bpf.c's uplink program (prio 1), which passes every packet on to it
KFUNC_HINT = (
    "the marker reads the qdisc backlog through bpf_cast_to_kern_ctx, which needs Linux >= 6.2 with BTF; "
    "on older kernels use impl 'kernel' (sch_red)"
)


@dataclass
class _Port:
    netns: str
    dev: str
    pin_dir: Path
    stats_fd: int
    clsact_ours: bool = False


def config_bytes(marking: Marking, link: LinkSpec) -> bytes:
    low, high = marking.thresholds_bytes(link.mtu)
    pmax = 1.0 if marking.mode == "step" else float(marking.pmax or 0.0)
    return CFG.pack(MODES[marking.mode], low, high, min(0xFFFFFFFF, round(pmax * 0xFFFFFFFF)))


class MarkerSet:
    """Owns every eBPF marker attachment of one run. ``close`` undoes all of them (idempotent)."""

    def __init__(self, prefix: str, build_dir: Path):
        self.prefix = prefix
        self.obj = Path(build_dir) / "marker.bpf.o"
        self.root = BPFFS / prefix
        self._ports: dict[tuple[str, str], _Port] = {}
        self._ncpu = bpfsys.possible_cpus()

    def pins(self) -> list[str]:
        """Pinned paths this set owns (for the run's state file)."""
        return [str(p.pin_dir) for p in self._ports.values()]

    def attach(
        self, netns: str, dev: str, marking: Marking, link: LinkSpec, classes: Sequence[tuple[TrafficClass, int]] = ()
    ) -> None:
        """Mark the port's queue with ``marking``; with ``classes`` ((class, HTB minor) pairs), mark each of those
        classes' own queue with its marking instead (a port with classes has no port-wide marking)."""
        if marking.mode == "off" and not classes:
            raise EcnError(f"{netns}/{dev}: marking is off, nothing to attach")
        if (netns, dev) in self._ports:
            raise EcnError(f"{netns}/{dev}: a marker is already attached")
        if not self.obj.exists():
            raise EcnError(f"{self.obj} is missing: build it with `python3 -m testbed.bpf.build`")
        self._check_root_qdisc(netns, dev)
        ensure_bpffs()
        pin_dir = self.root / f"{netns}__{dev}"
        pin_dir.mkdir(parents=True, exist_ok=False)
        port = _Port(netns, dev, pin_dir, -1)
        self._ports[(netns, dev)] = port
        try:
            res = run(
                [
                    tool("bpftool"),
                    "prog",
                    "load",
                    str(self.obj),
                    str(pin_dir / "prog"),
                    "type",
                    "classifier",
                    "pinmaps",
                    str(pin_dir),
                ],
                check=False,
            )
            if res.returncode != 0:
                why = res.stderr.strip()[-1200:]
                hint = KFUNC_HINT if "bpf_cast_to_kern_ctx" in why or "kfunc" in why else "see the verifier log"
                raise EcnError(f"loading the eBPF marker for {netns}/{dev} failed: {hint}\n{why}")
            cfg_fd = bpfsys.obj_get(pin_dir / "cfg")
            classes_fd = bpfsys.obj_get(pin_dir / "classes")
            try:
                bpfsys.update(cfg_fd, 0, CFG.pack(0, 0, 0, 0) if classes else config_bytes(marking, link))
                for c, minor in classes:
                    entry = config_bytes(link.class_marking(c), link.class_link(c)) + struct.pack("<II", minor, 0)
                    for d in c.dscp:
                        bpfsys.update(classes_fd, d, entry)
            finally:
                os.close(cfg_fd)
                os.close(classes_fd)
            port.stats_fd = bpfsys.obj_get(pin_dir / "stats")
            run(["tc", "qdisc", "add", "dev", dev, "clsact"], netns)
            port.clsact_ours = True
            run(
                [
                    "tc",
                    "filter",
                    "add",
                    "dev",
                    dev,
                    "egress",
                    "prio",
                    FILTER_PRIO,
                    "handle",
                    "1",
                    "bpf",
                    "da",
                    "pinned",
                    str(pin_dir / "prog"),
                ],
                netns,
            )
        except BaseException:
            self._detach(port)
            raise

    def _check_root_qdisc(self, netns: str, dev: str) -> None:
        import json

        out = run(["tc", "-j", "qdisc", "show", "dev", dev, "root"], netns).stdout
        kinds = [q.get("kind") for q in json.loads(out or "[]") if q.get("root")]
        if not kinds or kinds[0] not in BACKLOG_ROOTS:
            raise EcnError(
                f"{netns}/{dev}: root qdisc {kinds[0] if kinds else 'none'!r} keeps no byte backlog the marker can "
                f"read; shape the port first (htb + fifo leaf); readable roots: {', '.join(sorted(BACKLOG_ROOTS))}"
            )

    def read_marks(self) -> dict[tuple[str, str], dict[str, int]]:
        """(netns, dev) -> counters summed over CPUs: marks, ect_seen, not_ect, max_backlog, unreadable.

        Raises EcnError when a port's qdisc keeps per-CPU stats (the marker could not read its backlog).
        """
        stride = (STATS.size + 7) // 8 * 8
        out: dict[tuple[str, str], dict[str, int]] = {}
        for key, port in self._ports.items():
            raw = bpfsys.lookup(port.stats_fd, 0, stride * self._ncpu)
            tot = dict.fromkeys(STATS_FIELDS, 0)
            for cpu in range(self._ncpu):
                vals = STATS.unpack_from(raw, cpu * stride)
                for name, v in zip(STATS_FIELDS, vals, strict=True):
                    tot[name] = max(tot[name], v) if name == "max_backlog" else tot[name] + v
            if tot["unreadable"]:
                raise EcnError(
                    f"{key[0]}/{key[1]}: the marker could not read the qdisc backlog "
                    f"({tot['unreadable']} packets): its root qdisc keeps per-CPU stats"
                )
            out[key] = tot
        return out

    def _detach(self, port: _Port) -> None:
        detach_tc(port.netns, port.dev, "egress", FILTER_PRIO, port.clsact_ours)
        port.stats_fd = unpin(port.stats_fd, port.pin_dir)
        self._ports.pop((port.netns, port.dev), None)

    def close(self) -> None:
        for port in list(self._ports.values()):
            self._detach(port)
        remove_empty(self.root)
