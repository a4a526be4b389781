"""The generator contract (docs/architecture.md) and what every generator shares.

``check(caps)`` refuses before anything starts, ``start(ctx)`` spawns processes through ``ctx.procs`` (never
blocks long), ``wait(timeout)`` raises ``GeneratorError`` with the failing process's stderr tail (or on timeout),
``stop()`` is idempotent, ``parse(raw_dir)`` is a pure function of the files in ``raw_dir``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from testbed.errors import TestbedError
from testbed.host.procs import Proc, ProcessGroup
from testbed.spec.link import LinkSpec
from testbed.spec.schemas import SCHEMAS
from testbed.spec.topology import HostInfo
from traffic.gate import gate_env
from traffic.placement import SourcePorts

if TYPE_CHECKING:
    from testbed.host.capabilities import Capabilities

REPO = Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3"
Rows = dict[str, list[dict[str, Any]]]


# The columns of every table a traffic parser returns: the record format's own schema (results/tables.py).
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {name: cols for name, (cols, _) in SCHEMAS.items()}


class GeneratorError(TestbedError, RuntimeError):
    """A job that cannot run, failed or stalled; the message says which process and why."""


@dataclass
class RunContext:
    """What a generator gets from the run: the built fabric's hosts, the process owner, where raw files go,
    and the host link (rate, MTU, payload rate) for the ideal-time formulas."""

    hosts: dict[str, HostInfo]
    procs: ProcessGroup
    raw_dir: Path
    host_link: LinkSpec = field(default_factory=LinkSpec)
    # the kernel's name of a congestion control in this run: the BPF DCTCP registers as dctcp_<prefix>
    cc_name: Callable[[str], str] = field(default=lambda cc: cc)
    # the start gate's go file (traffic.gate): with it, processes set up first and traffic starts at one go time
    go_file: Path | None = None
    # every flow's source port (traffic.placement): the same in every variant of a repeat, new in each repeat
    ports: SourcePorts = field(default_factory=lambda: SourcePorts(seed=0))

    def kernel_cc(self, cc: str | None) -> str | None:
        return None if cc is None else self.cc_name(cc)

    @property
    def payload_Bps(self) -> float:
        return self.host_link.payload_rate_bps / 8


def tos_of(dscp: int | None) -> int | None:
    """The IP TOS byte for a job's ``dscp`` (ECN bits left to the stack); None for none or DSCP 0."""
    return dscp << 2 if dscp else None


class Generator(Protocol):
    name: str

    def check(self, caps: Capabilities) -> None: ...
    def start(self, ctx: RunContext) -> None: ...
    def wait(self, timeout: float) -> None: ...
    def stop(self) -> None: ...
    def parse(self, raw_dir: Path) -> Rows: ...


def check_cc(caps: Capabilities, cc: str | None, job: str) -> None:
    """A per-socket congestion control must exist in this kernel (the probe's ``cc.<name>``; unknown passes)."""
    if cc == "dctcp" and caps.ecn.dctcp in ("kernel", "bpf"):
        return  # the run provides it: the kernel module, or the project's BPF struct_ops DCTCP
    if cc is not None and caps.cc.get(cc) is False:
        raise GeneratorError(f"job {job}: congestion control {cc} is not available in this kernel")


def host(ctx: RunContext, name: str, job: str) -> HostInfo:
    if name not in ctx.hosts:
        raise GeneratorError(f"job {job}: host {name!r} is not in the fabric (hosts: {', '.join(sorted(ctx.hosts))})")
    return ctx.hosts[name]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSON-lines file; a torn last line (a killed writer) is ignored."""
    out = []
    with open(path) as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


class ProcGenerator:
    """Base of generators that run a set of processes to completion (servers, if any, are stopped at the end)."""

    kind = ""

    def __init__(self, name: str, start_after: float = 0.0):
        self.name = name
        self.start_after = start_after
        self.procs: list[Proc] = []  # must exit 0 by themselves
        self.servers: list[Proc] = []  # run until stopped
        self.ready_files: list[Path] = []  # gated processes' ready files: traffic starts once all exist
        self.timeout = 60.0
        self._started_at = 0.0

    def check(self, caps: Capabilities) -> None:
        pass

    def _spawn(
        self, ctx: RunContext, label: str, argv: list[str], netns: str, server: bool = False, gated: bool = False
    ) -> Proc:
        """Start one process of this job. ``gated``: it says when it is set up and waits for the go time
        (traffic.gate); the run starts traffic only once every gated process is ready."""
        raw = ctx.raw_dir
        env = {"PYTHONPATH": str(REPO)}
        if ctx.go_file is not None:
            ready = raw / f"{self.name}.{label}.ready" if gated else None
            env.update(gate_env(ctx.go_file, ready, self.start_after))
            if ready is not None:
                self.ready_files.append(ready)
        proc = ctx.procs.spawn(
            f"{self.name}:{label}",
            argv,
            netns=netns,
            stdout=raw / f"{self.name}.{label}.out",
            stderr=raw / f"{self.name}.{label}.err",
            env=env,
            cwd=REPO,
        )
        (self.servers if server else self.procs).append(proc)
        return proc

    def ready(self) -> bool:
        """Every gated process is set up (raises GeneratorError when one of this job's processes died)."""
        for p in self.procs + self.servers:
            rc = p.poll()
            if rc is not None and (rc != 0 or p in self.servers):
                raise GeneratorError(f"job {self.name}: {p.name} exited {rc} before traffic started: {p.stderr_tail()}")
        return all(f.exists() for f in self.ready_files)

    def go(self, ctx: RunContext) -> None:
        """At the go time + start_after: start what is not gated (iperf3's client). Nothing by default."""

    def _fail_if_dead_server(self) -> None:
        for s in self.servers:
            if s.poll() is not None:
                raise GeneratorError(f"job {self.name}: {s.name} exited {s.returncode} early: {s.stderr_tail()}")

    def wait(self, timeout: float) -> None:
        """Wait for every client process; the first failure (or the deadline) fails the job with stderr."""
        deadline = time.monotonic() + timeout
        pending = list(self.procs)
        while pending:
            for p in list(pending):
                rc = p.poll()
                if rc is None:
                    continue
                pending.remove(p)
                if rc != 0:
                    self.stop()
                    raise GeneratorError(f"job {self.name}: {p.name} exited {rc}: {p.stderr_tail() or '(no stderr)'}")
            self._fail_if_dead_server()
            if pending and time.monotonic() > deadline:
                names = ", ".join(p.name for p in pending)
                self.stop()
                raise GeneratorError(f"job {self.name}: timed out after {timeout:g} s waiting for {names}")
            if pending:
                time.sleep(0.02)

    def stop(self) -> None:
        for p in reversed(self.procs + self.servers):
            if p.poll() is None:
                try:
                    p.stop(grace=1.0)
                except TimeoutError:
                    pass
