"""``testbed calibrate``: measure this machine's CPU cost of forwarding and of the queue sampler, once, and cache it.

    python3 -m testbed calibrate                             # measure (about 35 s; builds a fabric), cache, print
    python3 -m testbed calibrate --show                      # print the cached calibration
    python3 -m testbed calibrate --predict scenarios/*.yaml  # every point's predicted load against the budget

What is measured, on a 2-spine x 4-leaf x 2-host fabric (14 namespaces, cubic, ``gso_max_segs 1``, drop-tail):
an 8-flow iperf3 ring (host i -> host i+1: half the flows cross 1 router, half 3, so 3 veths per packet) at
MTU 9000 and 1500, two rates each well below saturation (``PLAN``), with the queue sampler at 1 kHz as in a run
(a busy sampler keeps the CPUs out of idle, which makes each packet cheaper: forwarding alone is not what a run
sees). Per window, the machine's busy core-seconds are ``cores x wall - (idle + iowait + steal)``: this kernel
counts busy time by ticks, which miss short periodic bursts such as the sampler's, while it measures idle time
exactly (NO_HZ); steal is the hypervisor running another guest. From that come off the CPU of processes that are
not the calibration's (other users of a shared machine), the idle fabric's baseline (measured the same way, no
traffic, no sampler) and the sampler's own CPU (/proc/PID/stat); the rest is forwarding. The packets and bytes
that crossed veths are the sum of every interface's tx counters. The fit is ``core_s = a x crossings + b x bytes``
(``testbed.preflight.CostModel``; the senders' and receivers' TCP work is folded into a and b). The sampler is
fitted on its own CPU over its ticks, its namespaces and the rows it wrote, from the traffic windows and two idle
windows (all 14 namespaces, then 4).

The result is cached at ``CACHE`` with the machine's facts (kernel, CPU count, CPU model), the date and the code's
revision; the preflight uses it while the kernel, CPU count and CPU model match (``load_matching``). Nothing
calibrates on its own: a run without a calibration uses the built-in constants and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.preflight import CostModel

CACHE = Path("/var/lib/testbed/calibration.json")
FORMAT = 1
REPO = Path(__file__).resolve().parents[1]
PF_KTHREAD = 0x00200000  # task flag of kernel threads (/proc/PID/stat field 9)
CLK_TCK = os.sysconf("SC_CLK_TCK")
PORT = 5401
PLAN: tuple[tuple[int, tuple[float, ...]], ...] = ((9000, (50e6, 100e6)), (1500, (8e6, 15e6)))
WINDOW_S = 4.0  # measured part of each traffic window
OMIT_S = 1.0  # slow start, not measured
IDLE_S = 2.0  # idle baseline, and each idle sampler window
SAMPLER_HZ, SAMPLER_LINK_HZ, SAMPLER_CPU_HZ = 1000.0, 100.0, 10.0  # a run's defaults (testbed.scenario)
SUBSET_NAMESPACES = 4
FOREIGN_WARN = 0.15  # share of the machine other processes may use before the result is flagged as noisy
BUSY_WARN = 0.9  # a window this busy was CPU-bound: its cost per packet is not the unloaded one


class CalibrationError(TestbedError, RuntimeError):
    """The calibration could not measure (a flow did not run, nothing to fit); nothing is cached."""


# --- machine facts and the cache -------------------------------------------------------------------------------
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
    try:
        rev = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        )
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(repo), "diff", "--quiet", "HEAD"], capture_output=True).returncode
        return rev.stdout.strip() + ("+dirty" if dirty else "")
    except OSError:
        return "unknown"


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


def save(cal: Calibration, path: Path = CACHE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cal.to_dict(), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load(path: Path = CACHE) -> Calibration | None:
    """The cached calibration, or None when there is none or it cannot be read."""
    try:
        return Calibration.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def load_matching(path: Path = CACHE, machine: Machine | None = None) -> Calibration | None:
    """The cached calibration if it was measured on this kernel, CPU count and CPU model; else None."""
    cal = load(path)
    if cal is None or not cal.matches(machine or Machine.here()):
        return None
    return cal


def status(path: Path = CACHE, machine: Machine | None = None) -> dict[str, Any]:
    """What doctor and the capabilities record say: ``calibrated`` (with the summary), ``stale`` (measured on
    another kernel or CPU), or ``not calibrated``."""
    cal = load(path)
    here = machine or Machine.here()
    if cal is None:
        return {"status": "not calibrated", "path": str(path)}
    if not cal.matches(here):
        return {"status": "stale", "path": str(path), **cal.summary()}
    return {"status": "calibrated", "path": str(path), **cal.summary()}


def describe_status(st: dict[str, Any]) -> tuple[str, str, str]:
    """(status, what it means, what to do) for doctor's table."""
    if st.get("status") == "calibrated":
        values = (
            f"{st['per_crossing_s'] * 1e6:.2f} us/packet/veth + {st['per_byte_s'] * 1e9:.3f} ns/byte; sampler "
            f"{st['sampler_per_tick_s'] * 1e6:.0f} us/tick + {st['sampler_per_netns_s'] * 1e6:.1f} us/namespace/tick + "
            f"{st['sampler_per_row_s'] * 1e6:.1f} us/row"
        )
        return f"yes ({st['date'][:10]}, rev {st['revision']})", values, ""
    if st.get("status") == "stale":
        m = st.get("machine") or {}
        return (
            "STALE",
            f"measured on {m.get('kernel')} / {m.get('cpus')} x {m.get('cpu_model')}: the preflight uses built-in "
            "constants",
            "run `python3 -m testbed calibrate`",
        )
    return (
        "not calibrated: run testbed calibrate",
        "the preflight's CPU estimate uses built-in constants (uncalibrated)",
        "run `python3 -m testbed calibrate` (about 40 s)",
    )


# --- fitting (pure) ----------------------------------------------------------------------------------------------
def _lstsq(rows: Sequence[Sequence[float]], rhs: Sequence[float], weights: Sequence[float]) -> list[float]:
    """Weighted least squares through the origin, each coefficient kept >= 0 (a negative one is dropped and the rest
    refitted: the costs are physical, and noise must not make one negative)."""
    import numpy as np

    a = np.array(rows, dtype=float)
    y = np.array(rhs, dtype=float)
    w = np.sqrt(np.array(weights, dtype=float))
    keep = list(range(a.shape[1]))
    while keep:
        coef, *_ = np.linalg.lstsq(a[:, keep] * w[:, None], y * w, rcond=None)
        if (coef >= 0).all():
            out = [0.0] * a.shape[1]
            for i, c in zip(keep, coef):
                out[i] = float(c)
            return out
        keep.pop(int(np.argmin(coef)))
    return [0.0] * a.shape[1]


def fit_forwarding(samples: Iterable[ForwardingSample]) -> tuple[float, float]:
    """(core-seconds per crossing, per byte crossed) from traffic windows, each weighted by 1/cost² (relative
    error: a cheap window counts as much as an expensive one)."""
    s = [x for x in samples if x.crossings > 0 and x.forwarding_core_s > 0]
    if not s:
        raise CalibrationError("no traffic window with forwarding CPU to fit")
    a, b = _lstsq(
        [(x.crossings, x.bytes) for x in s],
        [x.forwarding_core_s for x in s],
        [1 / x.forwarding_core_s**2 for x in s],
    )
    return a, b


def fit_sampler(samples: Iterable[SamplerSample]) -> tuple[float, float, float]:
    """(core-seconds per tick, per namespace per tick, per row) from sampler lifetimes, relative error."""
    s = [x for x in samples if x.cpu_s > 0 and x.ticks > 0]
    if not s:
        raise CalibrationError("no sampler window to fit")
    tick, ns, row = _lstsq(
        [(x.ticks, x.ticks * x.namespaces, x.rows) for x in s], [x.cpu_s for x in s], [1 / x.cpu_s**2 for x in s]
    )
    return tick, ns, row


def calibration_from(
    forwarding: Sequence[ForwardingSample],
    sampler: Sequence[SamplerSample],
    machine: Machine,
    date: str,
    revision: str,
    duration_s: float = 0.0,
    idle_cores: float = 0.0,
    notes: Sequence[str] = (),
) -> Calibration:
    """Fit both models and wrap them with the facts of the measurement."""
    a, b = fit_forwarding(forwarding)
    tick, ns, row = fit_sampler(sampler)
    return Calibration(
        machine,
        date,
        revision,
        a,
        b,
        tick,
        ns,
        row,
        duration_s,
        idle_cores,
        tuple(forwarding),
        tuple(sampler),
        tuple(notes),
    )


# --- measuring ---------------------------------------------------------------------------------------------------
def _idle_s() -> float:
    """Idle + iowait + steal seconds summed over CPUs (/proc/stat: idle is exact under NO_HZ, unlike its
    tick-counted busy time; steal is the hypervisor running someone else)."""
    with open("/proc/stat") as fh:
        vals = [int(x) for x in fh.readline().split()[1:9]]
    vals += [0] * (8 - len(vals))
    return (vals[3] + vals[4] + vals[7]) / CLK_TCK


def _procs() -> dict[int, tuple[int, int, float]]:
    """Every process: pid -> (ppid, flags, user + system CPU seconds)."""
    out: dict[int, tuple[int, int, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        f = text[text.rfind(")") + 2 :].split()  # fields from 3 (state) on
        out[int(d)] = (int(f[1]), int(f[6]), (int(f[11]) + int(f[12])) / CLK_TCK)
    return out


def _foreign(procs: dict[int, tuple[int, int, float]], me: int) -> dict[int, float]:
    """CPU seconds of user-space processes that are not this process or its descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    ours, todo = set(), [me]
    while todo:
        pid = todo.pop()
        if pid not in ours:
            ours.add(pid)
            todo += children.get(pid, [])
    return {pid: cpu for pid, (_, flags, cpu) in procs.items() if pid not in ours and not flags & PF_KTHREAD}


@dataclass
class CpuWindow:
    """The machine's CPU over a window: busy core-seconds (from exact idle time) and other processes' share."""

    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    wall_s: float = 0.0
    busy_core_s: float = 0.0
    foreign_core_s: float = 0.0
    _t0: float = 0.0
    _idle0: float = 0.0
    _foreign0: dict[int, float] = field(default_factory=dict)

    def start(self) -> None:
        self._foreign0 = _foreign(_procs(), os.getpid())
        self._t0, self._idle0 = time.monotonic(), _idle_s()

    def stop(self) -> CpuWindow:
        t1, idle1 = time.monotonic(), _idle_s()
        foreign1 = _foreign(_procs(), os.getpid())
        self.wall_s = t1 - self._t0
        self.busy_core_s = max(0.0, self.cores * self.wall_s - (idle1 - self._idle0))
        # a process that started in the window counts in full; one that ended in it is not seen (a lower bound)
        self.foreign_core_s = sum(max(0.0, cpu - self._foreign0.get(pid, 0.0)) for pid, cpu in foreign1.items())
        return self

    @property
    def ours_core_s(self) -> float:
        return max(0.0, self.busy_core_s - self.foreign_core_s)


def settle(max_s: float = 8.0, window_s: float = 0.3, idle_share: float = 0.1) -> float:
    """Wait until this machine's CPU, other processes' apart, is quiet (namespaces of a torn-down fabric are freed
    by kernel workers after teardown returns). Returns the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        w = CpuWindow()
        w.start()
        time.sleep(window_s)
        w.stop()
        if w.ours_core_s < idle_share * w.cores * w.wall_s:
            break
    return time.monotonic() - t0


def fabric_spec_dict(rate_bps: float, mtu: int) -> dict[str, Any]:
    """The calibration fabric: the bench's 2x4x2 spine-leaf (an 8-host ring: half the flows under one leaf, half
    across a spine), cubic without ECN, packet-level (``gso_max_segs 1``), drop-tail."""
    return {
        "topology": "spine-leaf",
        "spines": 2,
        "leaves": 4,
        "hosts_per_leaf": 2,
        "host_link": {"rate": f"{rate_bps:.0f}bit", "mtu": mtu, "buffer": "300KB"},
        "transport": {"cc": "cubic", "ecn": False, "gso_max_segs": 1},
    }


def _set_links(fab: Any, mtu: int, rate_bps: float) -> None:
    """Every port of the built fabric to ``mtu`` and ``rate_bps`` (the HTB class as testbed.tc builds it)."""
    from testbed import tc
    from testbed.procs import run_checked

    frame = mtu + tc.ETH_HEADER
    burst = 2 * frame
    by_node: dict[str, list[str]] = {}
    for p in fab.ports():
        by_node.setdefault(p.node, []).append(p.dev)
    for node, devs in by_node.items():
        ns = fab.netns(node)
        run_checked(["ip", "-n", ns, "-batch", "-"], input="".join(f"link set dev {d} mtu {mtu}\n" for d in devs))
        lines = [
            f"class change dev {d} parent {tc.ROOT_HANDLE} classid {tc.CLASS_ID} htb rate {rate_bps:.0f}bit "
            f"ceil {rate_bps:.0f}bit burst {burst} cburst {burst} quantum {frame}\n"
            for d in devs
        ]
        run_checked(["tc", "-n", ns, "-batch", "-"], input="".join(lines))


def _counters(fab: Any) -> tuple[int, int, int]:
    """(tx packets, tx bytes) summed over every interface of every node, and tx packets of the hosts alone."""
    from testbed.procs import run_checked

    pk = by = host = 0
    for node in fab.topo.nodes:
        for link in json.loads(run_checked(["ip", "-n", fab.netns(node), "-s", "-j", "link", "show"]) or "[]"):
            if link.get("ifname") == "lo":
                continue
            tx = link.get("stats64", {}).get("tx", {})
            pk += int(tx.get("packets", 0))
            by += int(tx.get("bytes", 0))
            if node in fab.hosts:
                host += int(tx.get("packets", 0))
    return pk, by, host


def _sampler_refs(fab: Any, namespaces: int | None = None) -> list[Any]:
    from testbed.telemetry import PortRef

    nodes = list(fab.topo.nodes)[:namespaces] if namespaces else list(fab.topo.nodes)
    return [PortRef(fab.netns(p.node), p.dev, node=p.node) for p in fab.ports() if p.node in nodes]


def _sampler_sample(health: dict[str, Any], namespaces: int, traffic: bool) -> SamplerSample:
    rates = [float(s.get("rate_hz", 0.0)) for s in (health.get("per_netns") or {}).values()]
    duration = float(health.get("duration_s", 0.0))
    rows = health.get("rows") or {}
    return SamplerSample(
        namespaces=namespaces,
        ticks=(sum(rates) / len(rates) if rates else 0.0) * duration,
        rows=int(rows.get("queues", 0)) + int(rows.get("links", 0)),
        cpu_s=float(health.get("cpu_share", 0.0)) * duration,
        duration_s=duration,
        traffic=traffic,
    )


@contextmanager
def _sampler(fab: Any, out: Path, namespaces: int | None = None) -> Iterator[Any]:
    from testbed.telemetry import start_sampler

    handle = start_sampler(
        fab.procs,
        _sampler_refs(fab, namespaces),
        out,
        rate_hz=SAMPLER_HZ,
        link_hz=SAMPLER_LINK_HZ,
        cpu_hz=SAMPLER_CPU_HZ,
    )
    try:
        yield handle
    finally:
        handle.stop()


def _proc_cpu(proc: Any) -> float:
    t = proc.cpu_times()
    return float(sum(t)) if t else 0.0


def ring_flows(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """Host i -> host i+1 (the last to the first)."""
    return [(h, hosts[(i + 1) % len(hosts)]) for i, h in enumerate(hosts)]


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
    procs = []
    out.mkdir(parents=True, exist_ok=True)
    with _sampler(fab, out / "sampler") if with_sampler else nullcontext() as handle:
        for i, (_src, dst) in enumerate(flows):
            procs.append(
                fab.procs.spawn(f"iperf3-s-{i}", ["iperf3", "-s", "-1", "-p", str(PORT + i)], netns=fab.netns(dst))
            )
        time.sleep(0.3)
        clients = []
        for i, (src, dst) in enumerate(flows):
            argv = ["iperf3", "-c", fab.hosts[dst].ip, "-p", str(PORT + i), "-C", "cubic"]
            argv += ["-t", f"{OMIT_S + window_s + 2:g}"]
            clients.append(
                fab.procs.spawn(f"iperf3-c-{i}", argv, netns=fab.netns(src), stderr=out / f"iperf3-{src}-{dst}.err")
            )
        procs += clients
        try:
            time.sleep(OMIT_S)
            t0, c0, t0b = time.monotonic(), _counters(fab), time.monotonic()
            s0 = _proc_cpu(handle.proc) if handle else 0.0
            w = CpuWindow()
            w.start()
            time.sleep(window_s)
            w.stop()
            s1 = _proc_cpu(handle.proc) if handle else 0.0
            t1, c1, t1b = time.monotonic(), _counters(fab), time.monotonic()
            ended = [c for c in clients if c.poll() is not None]
            if ended:
                raise CalibrationError(f"iperf3 client {ended[0].name} ended early: {ended[0].stderr_tail(3)}")
        finally:
            for p in reversed(procs):
                p.stop(grace=1.0)
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
    samp = _sampler_sample(handle.health or {}, len(fab.topo.nodes), traffic=True) if handle else None
    return fwd, samp


def _idle_sampler(fab: Any, out: Path, namespaces: int | None, seconds: float, baseline_cores: float) -> SamplerSample:
    """The sampler alone on the idle fabric (over ``namespaces`` of its nodes, or all)."""
    with _sampler(fab, out, namespaces) as handle:
        w = CpuWindow()
        w.start()
        time.sleep(seconds)
        w.stop()
    s = _sampler_sample(handle.health or {}, namespaces or len(fab.topo.nodes), traffic=False)
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
    from testbed.fabric import Fabric
    from testbed.fabricspec import FabricSpec

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
            _set_links(fab, mtu, rate)
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


# --- command line ------------------------------------------------------------------------------------------------
def format_calibration(cal: Calibration) -> str:
    m = cal.machine
    lines = [
        f"calibration of {m.kernel}, {m.cpus} x {m.cpu_model} ({cal.date}, rev {cal.revision}, {cal.duration_s:g} s)",
        f"  forwarding: {cal.per_crossing_s * 1e6:.2f} us per packet per veth + {cal.per_byte_s * 1e9:.3f} ns per byte",
        f"  queue sampler: {cal.sampler_per_tick_s * 1e6:.1f} us per tick + {cal.sampler_per_netns_s * 1e6:.1f} us per "
        f"namespace per tick + {cal.sampler_per_row_s * 1e6:.1f} us per row",
    ]
    model = cal.model
    for s in cal.forwarding:
        frame = s.bytes / s.crossings if s.crossings else 0.0
        pred = s.crossings * model.per_crossing_s + s.bytes * model.per_byte_s
        lines.append(
            f"  MTU {s.mtu} {s.rate_bps / 1e6:g} Mbit/s: {s.forwarding_core_s / s.wall_s:.2f} core forwarding measured, "
            f"{pred / s.wall_s:.2f} fitted ({s.crossings / s.wall_s / 1e3:.0f}k crossings/s, {frame:.0f} B average)"
        )
    for x in cal.sampler:
        pred = x.ticks * (model.sampler_per_tick_s + x.namespaces * model.sampler_per_netns_s) + x.rows * (
            model.sampler_per_row_s
        )
        lines.append(
            f"  sampler {x.namespaces} namespaces{' under traffic' if x.traffic else ', idle'}: "
            f"{x.cpu_s / x.duration_s:.2f} core measured, {pred / x.duration_s:.2f} fitted "
            f"({x.rows / x.duration_s:.0f} rows/s)"
        )
    lines += [f"  note: {n}" for n in cal.notes]
    return "\n".join(lines)


def predict_rows(paths: Sequence[str]) -> list[dict[str, Any]]:
    """Every point of every scenario file: its predicted load against the budget (with this machine's model)."""
    from testbed.preflight import check_budget, current_model, variant_text
    from testbed.scenario import load_scenario_file

    caps = {"cpus": os.cpu_count() or 1}
    model = current_model()
    out = []
    for path in paths:
        sf = load_scenario_file(path)
        for point in sf.points:
            v = check_budget(point, caps, model)
            e = v.estimate
            out.append(
                {
                    "file": Path(path).name,
                    "point": variant_text(point) or "-",
                    "kernel": point.kernel,
                    "mtu": point.fabric.mtu,
                    "rate_mbit": point.fabric.host_link.rate_bps / 1e6,
                    "flows": e.flows,
                    "forwarding": e.load,
                    "sampler": e.sampler_load,
                    "total": e.total,
                    "peak": e.peak,
                    "budget": v.budget,
                    "fits": v.fits,
                    "max_rate_mbit": None if v.max_rate_bps is None else v.max_rate_bps / 1e6,
                    "calibrated": model.calibrated,
                }
            )
    return out


def format_predictions(rows: list[dict[str, Any]]) -> str:
    head = ("scenario", "point", "MTU", "Mbit/s", "flows", "fwd", "sampler", "total", "peak", "verdict")
    table = [head]
    for r in rows:
        verdict = (
            "fits" if r["fits"] else f"REFUSED (max {r['max_rate_mbit']:g} Mbit/s)" if r["max_rate_mbit"] else "REFUSED"
        )
        if r["kernel"] == "stock":
            verdict += " (guest kernel: not this calibration)"
        table.append(
            (
                r["file"],
                r["point"][:60],
                str(r["mtu"]),
                f"{r['rate_mbit']:g}",
                str(r["flows"]),
                f"{r['forwarding']:.0%}",
                f"{r['sampler']:.0%}",
                f"{r['total']:.0%}",
                f"{r['peak']:.0%}",
                verdict,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m testbed calibrate", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--predict", nargs="+", metavar="SCENARIO", help="print every point's predicted CPU load; no measuring"
    )
    ap.add_argument("--show", action="store_true", help="print the cached calibration; no measuring")
    ap.add_argument("--json", action="store_true", help="with --predict or --show: JSON")
    ap.add_argument("--wait", type=float, default=0.0, metavar="SECONDS", help="wait this long for another run's lock")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"where the calibration is kept (default {CACHE})")
    args = ap.parse_args(argv)
    if args.predict:
        from testbed.preflight import cpu_budget, current_model

        rows = predict_rows(args.predict)
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        print(f"budget {cpu_budget():.0%} of the machine; model: {current_model().source}")
        print(format_predictions(rows))
        return 0
    if args.show:
        cal = load(args.cache)
        if cal is None:
            print(f"not calibrated ({args.cache} missing or unreadable): run `python3 -m testbed calibrate`")
            return 1
        print(json.dumps(cal.to_dict(), indent=1) if args.json else format_calibration(cal))
        if not cal.matches(Machine.here()):
            print(f"STALE: this machine is {Machine.here()}; the preflight does not use it", file=sys.stderr)
        return 0
    if os.geteuid() != 0:
        print("error: calibrating builds a fabric: run as root", file=sys.stderr)
        return 2
    cal = measure(lock_wait=args.wait)
    save(cal, args.cache)
    print(format_calibration(cal))
    print(f"saved {args.cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
