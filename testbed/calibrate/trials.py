"""The calibration's trials on a 2-spine x 4-leaf x 2-host fabric (14 namespaces, cubic, ``gso_max_segs 1``,
drop-tail), and ``measure``: all of them, then the fit.

An 8-flow iperf3 ring (host i -> host i+1: half the flows cross 1 router, half 3, so 3 veths per packet) runs at
MTU 9000 and 1500, two rates each well below saturation (``PLAN``), with the queue sampler at 1 kHz as in a run
(a busy sampler keeps the CPUs out of idle, which makes each packet cheaper: forwarding alone is not what a run
sees). From each window's busy core-seconds (``testbed.calibrate.cpu``) come off the CPU of other processes, the
idle fabric's baseline (measured the same way, no traffic, no sampler) and the sampler's own CPU
(/proc/PID/stat); the rest is forwarding. The packets and bytes that crossed veths are the sum of every
interface's tx counters. The sampler is also measured alone, in two idle windows (all 14 namespaces, then 4).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from testbed.calibrate.cpu import CpuWindow, settle
from testbed.calibrate.fit import calibration_from
from testbed.calibrate.record import (
    Calibration,
    CalibrationError,
    ForwardingSample,
    Machine,
    SamplerSample,
    git_revision,
)
from testbed.calibrate.rig import (
    SAMPLER_HZ,
    fabric_spec_dict,
    proc_cpu_s,
    run_sampler,
    sampler_sample,
    set_links,
    tx_counters,
)
from testbed.calibrate.ring import iperf3_ring, ring_flows

PORT = 5401
PLAN: tuple[tuple[int, tuple[float, ...]], ...] = ((9000, (50e6, 100e6)), (1500, (8e6, 15e6)))
WINDOW_S = 4.0  # measured part of each traffic window
OMIT_S = 1.0  # slow start, not measured
IDLE_S = 2.0  # idle baseline, and each idle sampler window
SUBSET_NAMESPACES = 4
FOREIGN_WARN = 0.15  # share of the machine other processes may use before the result is flagged as noisy
BUSY_WARN = 0.9  # a window this busy was CPU-bound: its cost per packet is not the unloaded one


def _ring(
    fab: Any,
    out: Path,
    mtu: int,
    rate_bps: float,
    window_s: float,
    baseline_cores: float,
    with_sampler: bool,
    flows: Sequence[tuple[str, str]] | None = None,
) -> tuple[ForwardingSample, SamplerSample | None]:
    """One traffic window: iperf3 ``flows`` (default: the ring over every host) at ``rate_bps`` (and the sampler,
    ``with_sampler``); they run ``OMIT_S`` before the window opens."""
    flows = list(flows or ring_flows(list(fab.hosts)))
    out.mkdir(parents=True, exist_ok=True)
    client_args = ["-C", "cubic", "-t", f"{OMIT_S + window_s + 2:g}"]

    def spawn(role: str, i: int, host: str, argv: list[str]) -> Any:
        src, dst = flows[i]
        err = {"stderr": out / f"iperf3-{src}-{dst}.err"} if role == "client" else {}
        return fab.procs.spawn(f"iperf3-{role[0]}-{i}", argv, netns=fab.netns(host), **err)

    ips = {name: h.ip for name, h in fab.hosts.items()}
    with (
        run_sampler(fab, out / "sampler") if with_sampler else nullcontext() as handle,
        iperf3_ring(spawn, flows, ips, PORT, client_args) as clients,
    ):
        time.sleep(OMIT_S)
        t0, c0, t0b = time.monotonic(), tx_counters(fab), time.monotonic()
        s0 = proc_cpu_s(handle.proc) if handle else 0.0
        w = CpuWindow()
        w.start()
        time.sleep(window_s)
        w.stop()
        s1 = proc_cpu_s(handle.proc) if handle else 0.0
        t1, c1, t1b = time.monotonic(), tx_counters(fab), time.monotonic()
        ended = [c for c in clients if c.poll() is not None]
        if ended:
            raise CalibrationError(f"iperf3 client {ended[0].name} ended early: {ended[0].stderr_tail(3)}")
    # the counters are read just outside the CPU window, over ~0.1 s each: their deltas, scaled to the window
    scale = w.wall_s / ((t1 + t1b) / 2 - (t0 + t0b) / 2)
    fwd = ForwardingSample(
        mtu=mtu,
        rate_bps=rate_bps,
        wall_s=round(w.wall_s, 4),
        busy_core_s=round(w.busy_core_s, 4),
        foreign_core_s=round(w.foreign_core_s, 4),
        baseline_core_s=round(baseline_cores * w.wall_s, 4),
        sampler_core_s=round(s1 - s0, 4),
        crossings=round((c1[0] - c0[0]) * scale),
        bytes=round((c1[1] - c0[1]) * scale),
        endpoint_packets=round((c1[2] - c0[2]) * scale),
        with_sampler=with_sampler,
    )
    samp = sampler_sample(handle.health or {}, len(fab.topo.nodes), traffic=True) if handle else None
    return fwd, samp


def _idle_sampler(fab: Any, out: Path, namespaces: int | None, seconds: float, baseline_cores: float) -> SamplerSample:
    """The sampler alone on the idle fabric (over ``namespaces`` of its nodes, or all)."""
    with run_sampler(fab, out, namespaces) as handle:
        w = CpuWindow()
        w.start()
        time.sleep(seconds)
        w.stop()
    s = sampler_sample(handle.health or {}, namespaces or len(fab.topo.nodes), traffic=False)
    return replace(s, machine_core_s=round(w.ours_core_s - baseline_cores * w.wall_s, 4), window_s=round(w.wall_s, 4))


def measure(
    plan: Sequence[tuple[int, Sequence[float]]] = PLAN,
    window_s: float = WINDOW_S,
    idle_s: float = IDLE_S,
    lock_wait: float = 0.0,
    log: Callable[[str], None] = print,
) -> Calibration:
    """Build the calibration fabric once; measure its idle baseline, the sampler alone (all namespaces, then a
    few), and the ring with the sampler at every (MTU, rate) of ``plan``; fit. ``log`` gets one line per step."""
    from testbed.fabric.build import Fabric
    from testbed.spec.fabric import FabricSpec

    t_start = time.monotonic()
    first_mtu, first_rates = plan[0]
    spec = FabricSpec.from_dict(fabric_spec_dict(first_rates[-1], first_mtu))
    fwd: list[ForwardingSample] = []
    samp: list[SamplerSample] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tb-calibrate-") as tmp, Fabric(spec, lock_wait=lock_wait) as fab:
        d = Path(tmp)
        cores = os.cpu_count() or 1
        log(f"built {fab.prefix} (2x4x2 spine-leaf, {len(fab.topo.nodes)} namespaces) in {fab.build_s:.1f} s")
        settle()
        idle = CpuWindow()
        idle.start()
        time.sleep(idle_s)
        idle.stop()
        baseline = idle.ours_core_s / idle.wall_s
        log(f"idle fabric: {baseline:.2f} core (other processes {idle.foreign_core_s / idle.wall_s:.2f})")
        for k, ns in enumerate((None, SUBSET_NAMESPACES)):
            s = _idle_sampler(fab, d / f"idle-sampler-{k}", ns, idle_s, baseline)
            samp.append(s)
            log(
                f"idle sampler, {s.namespaces} namespaces at {SAMPLER_HZ:g} Hz: {s.cpu_s / s.duration_s:.2f} core "
                f"(machine {s.machine_core_s / s.window_s:.2f} core)"
            )
        trials = [(mtu, rate) for mtu, rates in plan for rate in rates]
        for i, (mtu, rate) in enumerate(trials):
            set_links(fab, mtu, rate)
            settle(max_s=3.0)
            f, s2 = _ring(fab, d / f"ring-{i}", mtu, rate, window_s, baseline, with_sampler=True)
            fwd.append(f)
            if s2 is not None:
                samp.append(s2)
            share = f.busy_core_s / (f.wall_s * cores)
            log(
                f"MTU {mtu} {rate / 1e6:g} Mbit/s + sampler: machine {share:.0%}, "
                f"forwarding {f.forwarding_core_s / f.wall_s:.2f} core, sampler {f.sampler_core_s / f.wall_s:.2f} core, "
                f"others {f.foreign_core_s / f.wall_s:.2f} core; {f.crossings / f.wall_s / 1e3:.0f}k crossings/s "
                f"({f.veths_per_packet:.2f} veths per packet)"
            )
            if share > BUSY_WARN:
                notes.append(f"MTU {mtu} {rate / 1e6:g} Mbit/s window was CPU-bound ({share:.0%} busy)")
            if f.foreign_core_s > FOREIGN_WARN * f.wall_s * cores:
                notes.append(
                    f"other processes used {f.foreign_core_s / f.wall_s / cores:.0%} of the machine in the MTU "
                    f"{mtu} {rate / 1e6:g} Mbit/s window (subtracted; calibrate on an idle machine for precise figures)"
                )
    return calibration_from(
        fwd,
        samp,
        Machine.here(),
        datetime.now(timezone.utc).isoformat(timespec="seconds"),
        git_revision(),
        duration_s=round(time.monotonic() - t_start, 1),
        idle_cores=round(baseline, 4),
        notes=notes,
    )
