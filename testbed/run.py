"""The run lifecycle: scenario point -> record -> fabric -> telemetry -> traffic -> tables -> fidelity -> summary.

Every point of a scenario's sweep is one run with its own record. A failed point leaves a record that says why
(status ``failed`` with the error) and the sweep goes on; the exit code says whether every run completed and
was faithful.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results import fidelity
from results.cli import report_main
from results.metrics import finish_run
from results.progress import Progress
from results.record import RunRecord, load_run
from testbed.fabric.build import Fabric
from testbed.fabric.counters import Counters, path_bytes, read_counters
from testbed.fabric.snapshot import sysctl_values, tc_text
from testbed.failures import EventRunner, LinkFailures
from testbed.host.capabilities import Capabilities
from testbed.host.machine import Machine
from testbed.host.mininet_compat import import_mininet
from testbed.machine import here, in_guest
from testbed.pfc import start_pfc
from testbed.plan import guestfit
from testbed.plan.budget import manifest_entry
from testbed.plan.point import PointPlan, plan_point
from testbed.plan.refs import qslots_config, sampler_ports, sender_refs
from testbed.spec.scenario import Scenario, ScenarioFile, load_scenario_file, resolved
from testbed.spec.schemas import SCHEMAS
from testbed.spec.settings import parse_settings
from testbed.spec.topology import Topology
from testbed.telemetry import start_sampler
from testbed.telemetry.budget import CpuBudget
from testbed.telemetry.canary import CanaryConfig, start_canary
from testbed.telemetry.netstat import snapshot_hosts
from testbed.telemetry.qslots import start_qslots
from testbed.vm import run_in_guest
from testbed.vm.kernel import kernel_cache
from testbed.vm.tools import vng_venv
from traffic.base import RunContext
from traffic.iperf import fixed_client_ports
from traffic.placement import SourcePorts
from traffic.workload import make_generator, run_workload


@dataclass
class RunResult:
    path: Path
    status: str  # complete | failed
    faithful: bool | None
    error: str | None = None
    retaken: tuple[Path, ...] = ()  # earlier records of this point that were not faithful (kept, superseded)


def tool_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, argv in {
        "iperf3": ["iperf3", "--version"],
        "iproute2": ["ip", "-V"],
        "python": [sys.executable, "--version"],
        "clang": ["clang", "--version"],
        "bpftool": ["bpftool", "version"],
    }.items():
        try:
            cp = subprocess.run(argv, capture_output=True, text=True, timeout=5)
            out[name] = (cp.stdout or cp.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            out[name] = "not installed"
    try:
        out["mininet"] = str(getattr(import_mininet(), "VERSION", "") or __import__("mininet.net").net.VERSION)
    except Exception:
        out["mininet"] = "not importable"
    return out


SENDER_HZ = 20.0  # TCP_INFO samples per second of each backlogged iperf3 sender (senders.csv)


def run_point(plan: PointPlan, out: Path, lock_wait: float = 0.0, retake_of: list[str] | None = None) -> RunResult:
    """Run one sweep point as its plan says (``testbed.plan.point.plan_point``); always returns (a failure is
    recorded, not raised), except for Ctrl-C.

    ``retake_of`` names the earlier records of this point that failed a fidelity guardrail (manifest ``retake_of``)."""
    scenario, machine = plan.scenario, plan.machine
    record = _create_record(scenario, out, machine, plan.guest_fit, retake_of)
    record.set("plan", plan.describe())
    extra_cc = job_ccs(scenario.workload)
    return _record_point(
        record,
        scenario,
        machine,
        lambda: Fabric(
            scenario.fabric,
            machine.caps,
            lock_wait=lock_wait,
            extra_cc=extra_cc,
            path_bytes=scenario.telemetry.path_bytes,
            plan=plan.fabric,
        ),
        plan.topo,
    )


def job_ccs(workload: Sequence[Any]) -> frozenset[str]:
    """The congestion controls the jobs set per socket, which the fabric must allow beyond the hosts' default."""
    return frozenset(str(j.cc) for j in workload if getattr(j, "cc", None))


def run_on_built(fab: Fabric, scenario: Scenario, out: Path, machine: Machine) -> RunResult:
    """Run ``scenario``'s workload on a fabric built already (the CLI's ``run JOB``), recorded as ``run_point``
    records a point; the fabric stays up."""
    telemetry, fit_notes = guestfit.fit_telemetry(scenario.telemetry, machine.env)
    scenario = dataclasses.replace(scenario, telemetry=telemetry)
    record = _create_record(scenario, out, machine, fit_notes, None)
    return _record_point(record, scenario, machine, lambda: contextlib.nullcontext(fab), fab.topo, check_jobs=True)


def _create_record(
    scenario: Scenario,
    out: Path,
    machine: Machine,
    fit_notes: dict[str, Any] | None,
    retake_of: list[str] | None,
) -> RunRecord:
    """The new record of a point as it will run here (its telemetry fitted to a guest: ``fit_notes``)."""
    return point_record(
        scenario,
        out,
        capabilities=machine.caps.to_dict(),
        tools=tool_versions(),
        guest=guest_environment(machine),
        **({"guest_fit": fit_notes} if fit_notes else {}),
        **({"retake_of": retake_of} if retake_of else {}),
    )


def point_record(scenario: Scenario, out: Path, **extra: Any) -> RunRecord:
    """A new record of a sweep point under ``out``: its name, variant, resolved scenario, repetition and seed, the
    scenario file's text, and ``extra`` manifest keys (a failed point the cluster client writes uses it too)."""
    return RunRecord.create(
        out,
        scenario.name,
        dict(scenario.variant),
        scenario=resolved(scenario),
        repeat_index=scenario.repeat_index,
        seed=scenario.seed,
        extra={
            "description": scenario.description,
            "scale": scenario.scale,
            "scenario_file": scenario.raw,
            "placement": scenario.placement.manifest(scenario.seed, scenario.repeat_index),
            **extra,
        },
    )


def _record_point(
    record: RunRecord,
    scenario: Scenario,
    machine: Machine,
    fabric: Callable[[], AbstractContextManager[Fabric]],
    topo: Topology,
    check_jobs: bool = False,
) -> RunResult:
    """Run the point on ``fabric()`` (entered and left here) into ``record``, judge and summarize it.
    ``check_jobs``: refuse a job this machine cannot run first (a planned point's plan did that already)."""
    caps = machine.caps
    try:
        entry = manifest_entry(scenario.fabric, scenario.workload, caps, scenario.telemetry, env=machine.env, topo=topo)
        record.set("preflight", entry)

        for i, job in enumerate(scenario.workload if check_jobs else ()):  # refuse before building
            make_generator(job, i).check(caps)
        with fabric() as fab:
            _run_on_fabric(record, scenario, fab, caps)
        window = record.manifest.get("traffic_window")
        record.flush()  # the guardrails read the tables from disk, once: the summary reads the same frames
        run = load_run(record.path)
        guest = fidelity.guest_thresholds(run.manifest)  # as the manifest says it ran
        verdict = fidelity.evaluate_run(run, window=tuple(window) if window else None, **guest)
        record.set("fidelity", verdict)
        finish_run(record, run=run)
        return RunResult(record.path, "complete", bool(verdict.get("faithful")))
    except KeyboardInterrupt:
        record.finish("failed", "interrupted (Ctrl-C)")
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        (record.path / "raw" / "traceback.txt").write_text(traceback.format_exc())
        record.finish("failed", error)
        if not isinstance(exc, Exception):
            raise
        return RunResult(record.path, "failed", None, error)


def _run_on_fabric(record: RunRecord, scenario: Scenario, fab: Fabric, caps: Capabilities) -> None:

    record.update(
        {
            "prefix": fab.prefix,
            "fabric": fab.topo.describe(),
            "marking": fab.marking,
            "load_balancing": fab.load_balancing,
            "sysctls": sysctl_values(fab),
            "tc_before": tc_text(fab),
            "build_s": round(fab.build_s, 3),
        }
    )
    record.event("built", f"{fab.prefix} in {fab.build_s:.2f} s")
    hosts_ns = {name: h.netns for name, h in fab.hosts.items()}
    netstat = record.table("netstat")
    for row in snapshot_hosts(hosts_ns, "start"):
        netstat.write(row)
    tele = scenario.telemetry
    go_file = record.raw_dir / "go"
    events = _link_events(record, scenario, fab)
    sampler = start_sampler(
        fab.procs,
        sampler_ports(fab),
        record.path,
        rate_hz=tele.queue_hz,
        link_hz=tele.link_hz,
        cpu_hz=tele.cpu_hz,
        senders=sender_refs(fab, scenario.workload),
        sender_hz=min(SENDER_HZ, tele.queue_hz),
        go_file=str(go_file),
    )
    record.event("sampler", "started")
    plan = fab.plan.pfc
    pfc = start_pfc(fab.procs, plan, fab.netns, record.path) if plan else None
    if pfc is not None:
        record.event("pfc", f"controller watching {len(plan.queues)} queues, {len(plan.feeds)} ingress ports")
    canary = start_canary(fab.procs, CanaryConfig(), record.path)
    qslots = start_qslots(fab.procs, qslots_config(fab, tele.slot_ns), record.path) if tele.bpf_queues else None
    record.set("queue_telemetry", ["poller", "bpf"] if qslots is not None else ["poller"])
    if qslots is not None:
        record.event("qslots", "started")
    ports = source_ports(fab, scenario)
    first_port = len(ports.assigned)  # an earlier run's on this fabric are in its own record
    ctx = RunContext(
        fab.hosts, fab.procs, record.raw_dir, fab.spec.host_link, cc_name=fab.cc_name, go_file=go_file, ports=ports
    )
    budget = CpuBudget()
    window: list[float] = []
    runner: list[EventRunner] = []

    def on_go(t_go: float) -> None:  # the measured window starts when traffic does, after every process set up
        window.append(t_go)
        budget.start(fab.procs.procs)
        if events is not None:
            runner.append(EventRunner(events, scenario.events, t_go))

    try:
        tables = run_workload(
            scenario.workload,
            ctx,
            caps,
            scenario.duration_s,
            on_event=record.event,
            predict_path=fab.predict_path,
            on_go=on_go,
        )
    finally:
        event_errors = runner[0].stop() if runner else []
        if events is not None:
            events.close()
        if window:
            record.set("traffic_window", [window[0], time.time()])
            record.set("cpu_budget", budget.stop(fab.procs.procs))
        for row in snapshot_hosts(hosts_ns, "end"):
            netstat.write(row)
        if qslots is not None:
            record.set("qtelem_health", qslots.stop())
        if pfc is not None:
            record.set("pfc", pfc.stop())
            record.set("tables", {**record.manifest["tables"], "pauses": SCHEMAS["pauses"][1]})
        record.set("sampler_health", sampler.stop())
        record.set("machine_stalls", canary.stop())
        record.set("tables", {**record.manifest["tables"], "cpu_stalls": SCHEMAS["cpu_stalls"][1]})
        record.set("tc_after", tc_text(fab))
        jobs = {j.name for j in scenario.workload}  # a job run beside this one on the same fabric has its own record
        record.table("placement").write_many(r for r in ports.rows()[first_port:] if r["job"] in jobs)
        counters = read_counters(fab)
        _record_counters(record, counters)
    for table, rows in tables.items():
        w = record.table(table)
        for row in rows:
            w.write(row)
    path_rows, path_entry = path_bytes(fab, counters.paths, [*tables.get("flows", []), *tables.get("fct", [])])
    if path_rows is not None:
        record.table("path_bytes").write_many(path_rows)
    record.set("path_bytes", path_entry)
    if event_errors:
        raise RuntimeError(f"a link event could not be applied: {event_errors[0]}")


def _record_counters(record: RunRecord, c: Counters) -> None:
    """The fabric's own counters at the run's end into the record: the manifest's ``flowlets``, classes.csv and
    marks.csv (each only when the fabric has them)."""
    if c.flowlets is not None:
        record.set("flowlets", c.flowlets)
    if c.classes:
        record.table("classes").write_many(c.classes)
    if c.marks is not None:
        record.table("marks").write_many(c.marks)


# One allocator per built fabric: a run on a fabric kept up (the lab CLI's `run JOB`) never binds a port that an earlier
# run's connection may still hold in TIME_WAIT (iperf3 binds --cport without SO_REUSEADDR) or that a job running
# beside it holds; a flow key asked for again gets its next port. A fabric built for one point starts afresh.
_PORTS: weakref.WeakKeyDictionary[Fabric, SourcePorts] = weakref.WeakKeyDictionary()


def source_ports(fab: Fabric, scenario: Scenario) -> SourcePorts:
    """The run's source ports (traffic.placement): drawn from the placement seed of its scenario and repeat."""
    seed = scenario.placement.seed(scenario.seed, scenario.repeat_index)
    fixed = fixed_client_ports(scenario.workload)
    ports = _PORTS.get(fab)
    if ports is None or ports.seed != seed:
        ports = _PORTS[fab] = SourcePorts(seed, reserved=fixed)
    else:
        ports.reserve(fixed)
    return ports


def _link_events(record: RunRecord, scenario: Scenario, fab: Fabric) -> LinkFailures | None:
    """The fabric's link failures (testbed.failures), logging to link_events.csv and events.csv; None without
    ``events:``."""
    if not scenario.events:
        return None
    table = record.table("link_events")
    lock = threading.Lock()  # rows come from the event thread and the detection timers

    def log(row: dict[str, Any]) -> None:
        after = f" after {row['after_s'] * 1e3:.1f} ms" if row.get("after_s") is not None else ""
        with lock:
            table.write(row)
            table.flush()
            record.event(f"link {row['event']}", f"{row['link']}{after} {row.get('detail') or ''}".strip(), row["t"])

    failures = LinkFailures(fab.topo, fab.netns, scenario.events[0].detection_s, log)
    fab.on_teardown(failures.close)  # its sockets would keep deleted namespaces alive, whatever ends the run
    return failures


def run_file(
    sf: ScenarioFile,
    out: Path,
    lock_wait: float = 0.0,
    retake_unfaithful: int = 0,
    *,
    machine: Machine,
) -> list[RunResult]:
    """Run every point; one result per point.

    A point whose run failed a fidelity guardrail (the emulation did not keep up: a stalled guest, a saturated CPU)
    is run again up to ``retake_unfaithful`` times. The unfaithful records stay on disk, the retake's manifest names
    them (``retake_of``) and the result lists them (``retaken``); a point that never ran faithfully stays unfaithful.
    ``machine``: where it runs (``testbed.machine.here``, built by the entry).
    """
    plans = [plan_point(point, machine) for point in sf.points]  # refuse what cannot run before the first starts
    progress = Progress(len(sf.points))
    progress.plan([p.duration_s + 5 for p in sf.points])
    results = []
    for point, plan in zip(sf.points, plans, strict=True):
        label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in point.variant) or point.name
        retaken: list[Path] = []
        while True:
            progress.start(label + (f" (retake {len(retaken)})" if retaken else ""), point.duration_s + 5)
            res = run_point(plan, out, lock_wait, retake_of=[p.name for p in retaken])
            progress.finish(res.status if res.faithful is not False else "not faithful")
            if res.faithful is not False or len(retaken) >= retake_unfaithful:
                break
            retaken.append(res.path)
            progress.total += 1
        results.append(dataclasses.replace(res, retaken=tuple(retaken)))
    progress.close()
    return results


@dataclass(frozen=True)
class RunOptions:
    """What `testbed run` / `testbed demo` were asked to do (built by the CLI, read here)."""

    scenario: Path
    out: Path = Path("runs")
    report: bool = True
    kernel: str | None = None  # run inside this pinned stock kernel (testbed vm)
    allow_unfaithful: bool = False  # exit 0 even when a run failed a fidelity guardrail
    retake_unfaithful: int = 0  # run an unfaithful point again, up to this many times
    lock_wait: float = 0.0  # seconds to wait for another run's lock
    cluster: str | None = None  # run the points on this Dask scheduler's workers (the CLI reads $TESTBED_CLUSTER)
    tls: tuple[str | None, str | None, str | None] = (None, None, None)  # the cluster's CA, certificate, key
    settings: tuple[str, ...] = ()  # --set KEY=VALUE, as given (testbed.spec.settings)


def _in_guest(args: RunOptions, kernel: str, env: Mapping[str, str]) -> int:
    """Re-run this command inside a pinned stock kernel (testbed vm) and return its exit code."""

    argv = [
        "/usr/bin/python3",
        "-m",
        "testbed",
        "run",
        str(Path(args.scenario).resolve()),
        "-o",
        str(Path(args.out).resolve()),
    ]
    argv += ["--no-report"] * (not args.report) + ["--allow-unfaithful"] * bool(args.allow_unfaithful)
    argv += ["--retake-unfaithful", str(args.retake_unfaithful)]
    argv += [arg for text in args.settings for arg in ("--set", text)]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    res = run_in_guest(
        argv,
        kernel=kernel,
        rwdirs=[str(Path(args.out).resolve())],
        lock_wait=args.lock_wait,
        host_env=env,
        cache=kernel_cache(env),
        venv=vng_venv(env),
    )
    print(f"guest kernel {res.kernel_version} ({res.accel}), booted in {res.boot_s:.1f} s, exit {res.rc}")
    return int(res.rc)


def guest_environment(machine: Machine) -> dict[str, str] | None:
    """The manifest's ``guest``: the guest-kernel mode's settings, None outside it."""
    return dict(machine.guest) if machine.in_guest else None


PointsRunner = Callable[[ScenarioFile, RunOptions], list[RunResult]]


def run_main(args: RunOptions, runner: PointsRunner | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run every point (here, or with ``runner``: the cluster client), print where the records are, report.
    ``env``: the command's environment, which the CLI read (the guest context, the CPU budget, what a guest run
    forwards)."""
    sf = load_scenario_file(args.scenario, parse_settings(args.settings))
    env = {} if env is None else env
    if runner is None and not in_guest(env):
        if args.kernel:
            return _in_guest(args, args.kernel, env)
        if sf.base.kernel == "stock":
            return _in_guest(args, "debian-6.1", env)
    out = Path(args.out)
    if runner is not None:
        results = runner(sf, args)
    else:
        results = run_file(
            sf, out, lock_wait=args.lock_wait, retake_unfaithful=args.retake_unfaithful, machine=here(env)
        )
    for r in results:
        for old in r.retaken:
            print(f"{'retaken':9s} {old} (NOT FAITHFUL, superseded)")
        flag = "" if r.faithful is not False else " (NOT FAITHFUL: see the manifest's fidelity)"
        print(f"{r.status:9s} {r.path}{flag}" + (f"  {r.error}" if r.error else ""))
    if args.report:
        report_dir = out / "reports" / results[0].path.name
        report_main([*(str(r.path) for r in results), "-o", str(report_dir)])
        print(f"HTML report: {(report_dir / 'report.html').resolve()}")
    bad = [r for r in results if r.status != "complete" or (r.faithful is False and not args.allow_unfaithful)]
    if bad:
        print(json.dumps([str(r.path) for r in bad]), file=sys.stderr)
    return 1 if bad else 0
