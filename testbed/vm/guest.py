"""Run one command inside a pinned stock kernel under QEMU (virtme-ng), stream its output, return its exit code.

The guest sees this machine's filesystem read-only (throw-away overlays on /etc, /usr, /var, /tmp, ...) except
the ``rwdirs``, which are shared read-write: the repo's ``runs/`` always, so run records written inside are on
the host afterwards. The guest's /run is its own tmpfs, so host locks and /run/testbed state are not shared.

Inside, the command gets PATH without pyenv (``python3`` is Debian's /usr/bin/python3) and
``TESTBED_GUEST=1``, ``TESTBED_GUEST_KERNEL=<uname -r>``, ``TESTBED_GUEST_KERNEL_PACKAGE=<package> <version>``,
``TESTBED_GUEST_ACCEL=kvm|tcg`` so the harness can record the guest kernel and scale rates down under TCG.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from testbed.host.ownership import BusyError, RunLock
from testbed.vm.accel import Accel, choose_accel
from testbed.vm.command import VngOptions, build_vng_command, parse_ready
from testbed.vm.errors import GuestTimeout, VmError
from testbed.vm.kernel import DEFAULT_CACHE, KernelImage, ensure_kernel
from testbed.vm.tools import VNG_VENV, ensure_guest_tools, vng_env

REPO = Path(__file__).resolve().parents[2]
RUNS_DIR = REPO / "runs"
# the host's settings a command in the guest reads as well (scenarios/conftest.py, testbed.plan)
FORWARDED_ENV = ("TESTBED_SCENARIO_RUNS", "TESTBED_RETAKES", "TESTBED_REVERSED", "TESTBED_CPU_BUDGET")


def forwarded_env(env: Mapping[str, str]) -> tuple[dict[str, str], list[Path]]:
    """The ``FORWARDED_ENV`` variables set on the host (``env``: the entry's environment), and the directories they
    need shared read-write (the scenario runs' directory, so that records written inside land where the host reads
    them)."""
    e = env
    out = {k: e[k] for k in FORWARDED_ENV if e.get(k)}
    dirs = [Path(out["TESTBED_SCENARIO_RUNS"]).resolve()] if "TESTBED_SCENARIO_RUNS" in out else []
    if dirs:
        out["TESTBED_SCENARIO_RUNS"] = str(dirs[0])
    return out, dirs


BENCH_LOCK = Path("/run/testbed-bench.lock")
# The guest's udev only needs the virtio-ports rule (it names the console ports vng reads the output from);
# hiding the other rules cuts most of udev's start-up (docs/bench.md).
UDEV_RULE = 'SUBSYSTEM=="virtio-ports", KERNEL=="vport*", ATTR{name}=="?*", SYMLINK+="virtio-ports/$attr{name}"\n'
KILL_GRACE_S = 3.0


@dataclass(frozen=True)
class GuestResult:
    rc: int  # the command's exit code
    output: str  # stdout and stderr as they arrived (ready marker removed)
    kernel_version: str  # uname -r of the guest kernel
    accel: str  # "kvm" or "tcg"
    boot_s: float  # host wall time from starting vng to the command starting
    wall_s: float  # host wall time of the whole guest run
    accel_reason: str = ""
    kernel_package: str = ""  # e.g. linux-image-6.1.0-57-amd64 6.1.192-3


def udev_rules_dir(cache: Path = DEFAULT_CACHE) -> Path:
    d = cache.parent / "guest-udev-rules"
    rule = d / "50-virtio-ports.rules"
    if not rule.exists() or rule.read_text() != UDEV_RULE:
        d.mkdir(parents=True, exist_ok=True)
        rule.write_text(UDEV_RULE)
    return d


def session_pids(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid:  # fields after "comm)": state ppid pgrp session ...
            pids.append(int(entry))
    return pids


def kill_session(proc: subprocess.Popen[str]) -> None:
    """TERM then KILL every process in the guest's session (vng, virtme-run, QEMU), then reap."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in session_pids(proc.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + KILL_GRACE_S
        while session_pids(proc.pid) and time.monotonic() < deadline:
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        if not session_pids(proc.pid):
            break
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass


class _Collector:
    """Forward lines from the guest's stdout/stderr as they come, keep them, note when the command started."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.lines: list[str] = []
        self.ready_at: float | None = None
        self.lock = threading.Lock()

    def pump(self, src: IO[str], dst: IO[str], watch_ready: bool) -> None:
        for line in src:
            if watch_ready and self.ready_at is None and parse_ready(line) is not None:
                self.ready_at = time.monotonic()
                continue
            with self.lock:
                self.lines.append(line)
            if self.stream:
                dst.write(line)
                dst.flush()


def _raise_on_term(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) inside the block, so that the cleanup under it runs: what this process
    started in sessions of their own (the KVM probe's QEMU, the guest's vng and QEMU) gets no signal of its own,
    and SIGTERM's default action would end this process at once and leave them running. Only the main thread can
    set a handler; elsewhere the block runs as it is."""
    main = threading.current_thread() is threading.main_thread()
    prev = signal.signal(signal.SIGTERM, _raise_on_term) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, prev if prev is not None else signal.SIG_DFL)


def _boot(cmd: list[str], env: dict[str, str], timeout: float, stream: bool) -> tuple[int, _Collector, float, float]:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,
    )
    col = _Collector(stream)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        threads = [
            threading.Thread(target=col.pump, args=(proc.stdout, sys.stdout, True), daemon=True),
            threading.Thread(target=col.pump, args=(proc.stderr, sys.stderr, False), daemon=True),
        ]
        for t in threads:
            t.start()
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc)
        stage = "the command had started" if col.ready_at else "the guest had not finished booting"
        raise GuestTimeout(f"guest timed out after {timeout:g} s (QEMU killed); {stage}", sid=proc.pid) from None
    except BaseException:
        kill_session(proc)
        raise
    finally:
        if proc.returncode is None or session_pids(proc.pid):
            kill_session(proc)
    for t in threads:
        t.join(timeout=5)
    return rc, col, t0, time.monotonic()


def run_in_guest(
    argv: Sequence[str],
    kernel: str = "debian-6.1",
    rwdirs: Sequence[Path | str] = (),
    timeout: float = 600.0,
    memory: str = "2G",
    cpus: int | None = None,
    accel: str = "auto",
    cwd: Path | str | None = None,
    stream: bool = True,
    install: bool = True,
    bench_lock: bool = False,
    cache: Path = DEFAULT_CACHE,
    run_lock: bool = True,
    lock_wait: float = 1800.0,
    host_env: Mapping[str, str] | None = None,
    venv: Path = VNG_VENV,
) -> GuestResult:
    """Run ``argv`` in the guest kernel; raises VmError (one-line reason) if the guest itself fails.

    ``host_env``: the host's settings the command inside reads as well (``FORWARDED_ENV``; the entry passes its
    environment; None: none). ``cache``, ``venv``: the kernel cache and the guest tools' venv (the entry reads
    their overrides: ``testbed.vm.kernel.kernel_cache``, ``testbed.vm.tools.vng_venv``).

    A command that fails is not an error: its exit code comes back in ``rc``. ``bench_lock`` holds
    /run/testbed-bench.lock on the host for the guest's lifetime (TCG uses every core); leave it False when the
    caller already holds it (a second open of the lock would wait on itself).

    ``run_lock`` holds the host's run lock (/run/testbed/lock, ``testbed.host.ownership.RunLock``) for the guest's
    lifetime, waiting up to ``lock_wait`` s for a native run to finish: under TCG QEMU uses every core, so no native
    fabric may build (and measure) while a guest runs; a native run started meanwhile waits or is refused with
    "another testbed run is active (... guest-kernel run)". The guest's own runs lock the guest's /run.
    """
    with ExitStack() as stack:
        stack.enter_context(sigterm_raises())  # first: the probe's and the guest's QEMU are killed on SIGTERM
        tools = ensure_guest_tools(venv, install=install)
        image: KernelImage = ensure_kernel(kernel, cache)
        chosen: Accel = choose_accel(tools.qemu, accel)
        forwarded, env_dirs = forwarded_env(host_env or {})
        shared = [RUNS_DIR, *env_dirs, *(Path(d).resolve() for d in rwdirs)]
        for d in shared:
            d.mkdir(parents=True, exist_ok=True)
        work = Path(cwd).resolve() if cwd is not None else Path.cwd()
        rw = tuple(dict.fromkeys(shared))
        if bench_lock:  # first, as benchmarks do (bench lock, then the run lock of their fabric)
            lock = stack.enter_context(open(BENCH_LOCK, "w"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        if run_lock:
            try:
                stack.enter_context(RunLock(lock_wait, label="guest-kernel run"))
            except BusyError as exc:
                raise VmError(f"guest not started: {exc}") from None
        for attempt in (chosen, Accel("tcg", f"KVM failed to boot the guest; {chosen.reason}")):
            env = {
                **forwarded,
                "TESTBED_GUEST": "1",
                "TESTBED_GUEST_KERNEL": image.version,
                "TESTBED_GUEST_KERNEL_PACKAGE": f"{image.package} {image.package_version}",
                "TESTBED_GUEST_ACCEL": attempt.name,
            }
            opts = VngOptions(
                image=image.image,
                accel=attempt.name,
                memory=memory,
                cpus=cpus,
                cwd=work,
                rwdirs=rw,
                rodirs=((Path("/usr/lib/udev/rules.d"), udev_rules_dir(cache)),),
                env=env,
            )
            cmd = build_vng_command(tools.vng, opts, list(argv))
            rc, col, t0, t1 = _boot(cmd, vng_env(tools), timeout, stream)
            if col.ready_at is not None:
                return GuestResult(
                    rc=rc,
                    output="".join(col.lines),
                    kernel_version=image.version,
                    accel=attempt.name,
                    boot_s=col.ready_at - t0,
                    wall_s=t1 - t0,
                    accel_reason=attempt.reason,
                    kernel_package=f"{image.package} {image.package_version}",
                )
            if attempt.name == "tcg":
                break
        tail = [ln.strip() for ln in col.lines if ln.strip()][-1:] or ["(no output)"]
        raise VmError(f"guest did not start the command (vng exit {rc}): {tail[0]}")
    raise AssertionError("unreachable")
