"""A scenario's workload: one generator per job, started at their ``start_after`` offsets, waited with timeouts.

``run_workload(jobs, ctx, caps, timeout)`` checks every generator before starting any, starts them in
``start_after`` order, waits for all (the first failure stops every generator and raises ``GeneratorError``),
stops them and returns the merged tables (name -> rows) parsed from the raw directory.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.spec.workload import (
    CollectiveJob,
    IperfJob,
    JobSpec,
    PipelineJob,
    PsJob,
    RttProbeJob,
    ScapyTrainJob,
    ShortFlowsJob,
    StepJob,
)
from traffic.base import Generator, GeneratorError, Rows, RunContext
from traffic.gate import write_atomic
from traffic.iperf import IperfGenerator
from traffic.probes import RttProbeGenerator, ShortFlowsGenerator
from traffic.ranked import RankedGenerator
from traffic.scapy_train import ScapyTrainGenerator

if TYPE_CHECKING:
    from testbed.host.capabilities import Capabilities


def make_generator(spec: JobSpec, index: int) -> Generator:
    """The generator of one job; ``index`` is its place in the workload (it picks distinct ports)."""
    if isinstance(spec, (CollectiveJob, StepJob, PsJob, PipelineJob)):
        return RankedGenerator(spec, index)
    if isinstance(spec, IperfJob):
        return IperfGenerator(spec, index)
    if isinstance(spec, RttProbeJob):
        return RttProbeGenerator(spec, index)
    if isinstance(spec, ShortFlowsJob):
        return ShortFlowsGenerator(spec, index)
    if isinstance(spec, ScapyTrainJob):
        return ScapyTrainGenerator(spec, index)
    raise GeneratorError(f"no generator for job kind {spec.kind}")


def merge(into: Rows, rows: Rows) -> None:
    for table, items in rows.items():
        into.setdefault(table, []).extend(items)


def parse_all(gens: Sequence[Generator], raw_dir: Path) -> Rows:
    tables: Rows = {}
    for g in gens:
        merge(tables, g.parse(raw_dir))
    return tables


def run_workload(
    jobs: Sequence[JobSpec],
    ctx: RunContext,
    caps: Capabilities,
    timeout: float,
    on_event: Callable[[str, str], None] | None = None,
    predict_path: Callable[[str, str, str, int, int], list[str]] | None = None,
    on_go: Callable[[float], None] | None = None,
) -> Rows:
    """Run every job to completion within ``timeout`` seconds; return the merged tables. With ``predict_path``
    (``Fabric.predict_path``) every flows row gets its ECMP path, nodes joined by ``>``.

    With ``ctx.go_file`` (the start gate, traffic.gate) every job's processes start and set up first; once all are
    ready the go time is written, ``on_go(go time)`` is called, and traffic (and ``timeout``) starts then."""
    event = on_event or (lambda kind, detail: None)
    gens = [make_generator(job, i) for i, job in enumerate(jobs)]
    for g in gens:
        g.check(caps)
    ctx.raw_dir.mkdir(parents=True, exist_ok=True)
    order = sorted(zip(jobs, gens), key=lambda jg: jg[0].start_after)
    started: list[Generator] = []
    try:
        if ctx.go_file is not None:
            t0 = _start_gated(order, ctx, started, event, on_go)
        else:
            t0 = time.monotonic()
            for job, g in order:
                delay = t0 + job.start_after - time.monotonic()
                if delay > 0:
                    _wait_started(started, delay)
                g.start(ctx)
                started.append(g)
                event("started", job.name)
        deadline = t0 + timeout
        for job, g in zip(jobs, gens):
            g.wait(max(0.0, min(deadline, time.monotonic() + getattr(g, "timeout", timeout)) - time.monotonic()))
            event("finished", job.name)
    except BaseException as exc:
        event("failed", str(exc))
        for g in reversed(started):
            g.stop()
        raise
    for g in reversed(started):
        g.stop()
    tables = parse_all(gens, ctx.raw_dir)
    if predict_path is not None:
        for row in tables.get("flows", []):
            if not row["path"] and row["sport"]:
                row["path"] = ">".join(predict_path(row["src"], row["dst"], row["proto"], row["sport"], row["dport"]))
    return tables


READY_TIMEOUT_S = 60.0  # every process set up (Python start-up, connections) within this, or the run fails
GO_LEAD_S = 0.02  # the go time is this far ahead of its writing, so every waiting process sees it in time


def _start_gated(
    order: Sequence[tuple[JobSpec, Generator]],
    ctx: RunContext,
    started: list[Generator],
    event: Callable[[str, str], None],
    on_go: Callable[[float], None] | None,
) -> float:
    """Start every job's processes, wait until all are set up, write the go time; start the ungated clients at
    go + start_after. Returns the go time on the monotonic clock."""
    assert ctx.go_file is not None
    for job, g in order:
        g.start(ctx)
        started.append(g)
        event("started", job.name)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(_ready(g) for g in started):
        if time.monotonic() > deadline:
            waiting = [g.name for g in started if not _ready(g)]
            raise GeneratorError(f"jobs {', '.join(waiting)} not set up within {READY_TIMEOUT_S:g} s")
        time.sleep(0.005)
    go_wall = time.time() + GO_LEAD_S
    go_mono = time.monotonic() + GO_LEAD_S
    write_atomic(ctx.go_file, f"{go_wall!r}\n")
    event("go", f"traffic starts at {go_wall:.6f}")
    if on_go is not None:
        on_go(go_wall)
    for job, g in order:
        go = getattr(g, "go", None)
        if go is None:
            continue
        delay = go_mono + job.start_after - time.monotonic()
        if delay > 0:
            _wait_started(started, delay)
        go(ctx)
    return go_mono


def _ready(g: Generator) -> bool:
    ready = getattr(g, "ready", None)
    return True if ready is None else bool(ready())


def _wait_started(started: list[Generator], delay: float) -> None:
    """Sleep ``delay`` s, but fail early if a generator already running has failed (wait(0) raises then)."""
    end = time.monotonic() + delay
    while time.monotonic() < end:
        for g in started:
            procs = getattr(g, "procs", [])
            if any(p.poll() not in (None, 0) for p in procs):
                g.wait(0)
        time.sleep(min(0.05, max(0.0, end - time.monotonic())))
