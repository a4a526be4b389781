"""The kernel queue telemetry as a process of the run: drain the slot rings while traffic runs, write the table at stop.

    /usr/bin/python3 -m testbed.telemetry.qslots --config CONFIG.json --out DIR

Every ``drain_s`` it copies the slots closed since the last drain and appends their raw bytes to DIR/qslots.raw (a
copy and a write: cheap enough for a measured window). On SIGINT/SIGTERM it detaches the programs, takes the last
slots (the open one of every port), writes DIR/qslots.csv (one row per port and busy slot, see
docs/record-format.md) and DIR/qtelem_health.json (per-port totals: sojourn and dequeue-gap histograms, packets,
marks, lost slots), removes the raw file, and exits 0. It creates DIR/qtelem.ready once the programs are attached.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from testbed.host.child import ChildHandle, StopFlag, child_main, start_child, stop_on_signals
from testbed.host.procs import ProcessGroup
from testbed.spec.schemas import SCHEMAS
from testbed.telemetry.qtelem import (
    DRAIN_S,
    GAP_BUCKETS,
    SLOT_DTYPE,
    SOJ_BUCKETS,
    QtelemError,
    QtPort,
    QueueTelemetry,
    settle,
    soj_edges_us,
)

QSLOTS_COLUMNS = SCHEMAS["qslots"][0]
assert QSLOTS_COLUMNS[-SOJ_BUCKETS - 1 :] == ("soj_n", *(f"soj_b{b}" for b in range(SOJ_BUCKETS)))


@dataclass(frozen=True)
class QslotsConfig:
    """What the process counts: the run's ports, the slot length and how often the rings are drained."""

    ports: tuple[QtPort, ...]
    slot_ns: int = 100_000
    drain_s: float = DRAIN_S

    def to_dict(self) -> dict[str, Any]:
        return {"ports": [asdict(p) for p in self.ports], "slot_ns": self.slot_ns, "drain_s": self.drain_s}

    @classmethod
    def load(cls, path: Path) -> QslotsConfig:
        d = json.loads(path.read_text())
        return cls(tuple(QtPort(**p) for p in d["ports"]), int(d["slot_ns"]), float(d["drain_s"]))


def slots_frame(slots: np.ndarray, cfg: QslotsConfig, wall_minus_mono: float) -> Any:
    """The qslots table: one row per port and slot, ``t`` the slot's start on the wall clock the record uses."""
    import pandas as pd

    s = slots[np.lexsort((slots["slot"], slots["port"]))]
    names = np.array([p.node for p in cfg.ports], dtype=object)
    devs = np.array([p.dev for p in cfg.ports], dtype=object)
    cols: dict[str, Any] = {
        "t": s["slot"].astype(np.float64) * (cfg.slot_ns / 1e9) + wall_minus_mono,
        "node": names[s["port"]],
        "dev": devs[s["port"]],
    }
    for c in QSLOTS_COLUMNS[3 : -SOJ_BUCKETS - 1]:
        cols[c] = s[c]
    cols["soj_n"] = s["soj"].sum(axis=1, dtype=np.uint64)  # every sojourn counted lands in one bucket
    for b in range(SOJ_BUCKETS):
        cols[f"soj_b{b}"] = s["soj"][:, b]
    return pd.DataFrame(cols, columns=list(QSLOTS_COLUMNS))


def port_totals(t: Any, port: QtPort) -> dict[str, Any]:
    """One port's run totals (a row of ``QueueTelemetry.totals()``) as the manifest's qtelem_health keeps them."""
    gaps = int(t["gap_n"])
    return {
        "enq_pkts": int(t["enq_seen"]),
        "deq_pkts": int(t["deq_seen"]),
        "marks": int(t["marks_seen"]),
        "soj_max_us": int(t["soj_max_ns"]) / 1e3,
        "soj_miss": int(t["soj_miss"]),
        "soj_hist": [int(x) for x in t["soj_total"]],
        "gap_n": gaps,
        "gap_mean_abs_us": int(t["gap_sum_abs_ns"]) / gaps / 1e3 if gaps else None,
        "gap_hist": [int(x) for x in t["gap"]],
        "gap_late": int(t["gap_late"]),
        "gap_late_us": port.late_ns / 1e3,
        "gso_skbs": int(t["gso_skbs"]),
    }


def health(qt: QueueTelemetry, cfg: QslotsConfig, rows: int, cpu_s: float, duration_s: float) -> dict[str, Any]:
    """Per-port totals and the reader's own cost, for the manifest and the direct fidelity check."""
    tot = qt.totals()
    ports = {f"{p.node}:{p.dev}": port_totals(tot[i], p) for i, p in enumerate(cfg.ports)}
    return {
        "source": "bpf",
        "object": qt.object.name,
        "slot_us": cfg.slot_ns / 1e3,
        "drain_s": cfg.drain_s,
        "ring_slots": qt.ring_slots,
        "lost_slots": qt.lost_slots,
        "rows": rows,
        "cpu_s": round(cpu_s, 4),
        "duration_s": round(duration_s, 3),
        "soj_edges_us": soj_edges_us(),
        "gap_definition": (
            f"gap_hist: {GAP_BUCKETS // 2} early then {GAP_BUCKETS // 2} late log2-us buckets of |dequeue gap - "
            "len x 8 / rate|, between two dequeues with data left between them (bucket b: < 2^b us)"
        ),
        "ports": ports,
    }


def run(cfg: QslotsConfig, out: Path, stop: StopFlag | threading.Event) -> dict[str, Any]:
    """Count until ``stop`` is set; write the table and the health file; return the health."""
    raw = out / "qslots.raw"
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    wall_minus_mono = time.time() - time.monotonic()
    with QueueTelemetry(cfg.ports, cfg.slot_ns, cfg.drain_s) as qt, open(raw, "ab", buffering=0) as fh:
        (out / "qtelem.ready").write_text(f"{os.getpid()}\n")
        while not stop.wait(cfg.drain_s):
            qt.drain_to(fh)
        qt.detach()
        qt.drain_to(fh)
        fh.write(qt.open_slots().tobytes())
        fh.flush()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        slots = settle(np.fromfile(raw, dtype=SLOT_DTYPE))
        slots_frame(slots, cfg, wall_minus_mono).to_csv(out / "qslots.csv", index=False)
        h = health(qt, cfg, len(slots), cpu, time.monotonic() - t0)
    (out / "qtelem_health.json").write_text(json.dumps(h, indent=1) + "\n")
    raw.unlink()
    return h


def start_qslots(procs: ProcessGroup, cfg: QslotsConfig, out: Path, ready_timeout: float = 20.0) -> ChildHandle:
    """Write DIR/qslots_config.json, spawn the process in ``procs``, wait until its programs are attached."""
    config = out / "qslots_config.json"
    config.write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
    proc = start_child(procs, "telemetry-qslots", "testbed.telemetry.qslots", config, out, out / "qtelem.ready",
                       out / "qslots.log", QtelemError, ready_timeout)  # fmt: skip
    return ChildHandle(proc, out / "qtelem_health.json", QtelemError)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m testbed.telemetry.qslots", description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cfg = QslotsConfig.load(args.config)
    args.out.mkdir(parents=True, exist_ok=True)
    if (args.out / "qslots.csv").exists():
        print(f"qslots: {args.out}/qslots.csv exists: a run record is never overwritten", file=sys.stderr)
        return 2
    run(cfg, args.out, stop_on_signals())
    return 0


if __name__ == "__main__":
    child_main("qslots", main)
