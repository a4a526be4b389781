"""Processes owned by a run: spawned in their own session (process group), stopped INT -> TERM -> KILL.

Every process the testbed starts goes through a ``ProcessGroup``, optionally inside a named network namespace
(``ip netns exec NAME argv...``; ``ip`` execs the command, so the pid we hold is the command's own pid). Each one
leads a new session (``start_new_session``), so stopping it signals its whole process group, children included.
A child starts with SIGINT and SIGQUIT at their defaults: a harness started in the background of a script inherits
them ignored (bash ignores both for asynchronous commands), and the first, gentle stop would then do nothing.
``stop_all`` stops in reverse spawn order and reaps everything; no wait here is without a timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from testbed.errors import TestbedError

IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip"


class CommandError(TestbedError, RuntimeError):
    """A short command that exited non-zero (or could not run); carries argv, rc and stderr."""

    def __init__(self, argv: Sequence[str], rc: int, stderr: str):
        self.argv = list(argv)
        self.rc = rc
        self.stderr = stderr
        tail = stderr.strip().splitlines()[-5:]
        super().__init__(f"{' '.join(self.argv)} exited {rc}: {' | '.join(tail) or '(no stderr)'}")


def _default_signals() -> None:
    """In the child before exec: SIGINT and SIGQUIT at their defaults, whatever the harness inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def netns_argv(argv: Sequence[str], netns: str | None) -> list[str]:
    """The argv that runs ``argv`` inside the named namespace ``netns`` (or unchanged when None)."""
    return [IP, "netns", "exec", netns, *argv] if netns else list(argv)


def run_checked(
    argv: Sequence[str],
    netns: str | None = None,
    timeout: float = 10,
    input: str | None = None,
) -> str:
    """Run a short command to completion (in ``netns`` if given) and return its stdout.

    Raises ``CommandError`` on a non-zero exit, a missing executable, or when it outlives ``timeout`` seconds (the
    command is then killed; rc -9).
    """
    full = netns_argv(argv, netns)
    try:
        res = subprocess.run(
            full,
            check=False,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise CommandError(full, -9, f"{err}\ntimed out after {timeout} s") from None
    except OSError as exc:
        raise CommandError(full, 127, str(exc)) from None
    if res.returncode != 0:
        raise CommandError(full, res.returncode, res.stderr)
    return res.stdout


def _tail(path: Path | None, lines: int = 10) -> str:
    if path is None or not path.exists():
        return ""
    with open(path, "rb") as fh:
        try:
            fh.seek(-4096, os.SEEK_END)
        except OSError:
            fh.seek(0)
        return "\n".join(fh.read().decode(errors="replace").splitlines()[-lines:])


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_times(pid: int) -> tuple[float, float] | None:
    """(user, system) CPU seconds of a live process from /proc/PID/stat, its reaped children's included."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": fields from 3 (state) on
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + cutime) / CLK_TCK, (stime + cstime) / CLK_TCK


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Proc:
    """One owned process (the leader of its own process group)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        popen: subprocess.Popen[bytes],
        stdout: Path | None,
        stderr: Path | None,
    ):
        self.name = name
        self.argv = argv
        self.pid = popen.pid
        self.stdout_path = stdout
        self.stderr_path = stderr
        self._popen = popen
        self._cpu_at_exit: tuple[float, float] | None = None  # (user, system) s from wait4, once reaped

    def __repr__(self) -> str:
        return f"Proc({self.name!r}, pid={self.pid}, rc={self.returncode})"

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def poll(self) -> int | None:
        """The exit code, or None while it runs. Reaps with wait4, keeping the CPU the process (and the children
        it reaped) used, which /proc no longer shows once it is gone."""
        if self._popen.returncode is not None:
            return self._popen.returncode
        try:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (Popen itself): the exit code is all there is
            return self._popen.poll()
        if pid == 0:
            return None
        self._cpu_at_exit = (usage.ru_utime, usage.ru_stime)
        self._popen.returncode = os.waitstatus_to_exitcode(status)
        return self._popen.returncode

    def wait(self, timeout: float) -> int:
        """Wait for exit; raise TimeoutError naming the process if it is still running after ``timeout`` s."""
        deadline = time.monotonic() + max(timeout, 0.0)
        delay = 0.0005
        while (rc := self.poll()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"process {self.name!r} (pid {self.pid}) still running after {timeout:g} s")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)
        return rc

    def cpu_times(self) -> tuple[float, float] | None:
        """(user, system) CPU seconds used so far, children it reaped included; None when unreadable."""
        if self.poll() is not None:
            return self._cpu_at_exit
        return proc_cpu_times(self.pid)

    def stderr_tail(self, lines: int = 10) -> str:
        """The last lines of its stderr file (empty when stderr was not sent to a file)."""
        return _tail(self.stderr_path, lines)

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, grace: float = 2.0) -> int | None:
        """Stop the process group: SIGINT, then SIGTERM, then SIGKILL, ``grace`` s apart; reap the leader.

        Returns the leader's exit code. Children that outlive the leader in the same group are killed too.
        """
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if self.poll() is not None and not _group_alive(self.pid):
                break
            self.signal_group(sig)
            deadline = time.monotonic() + (grace if sig != signal.SIGKILL else 5.0)
            while time.monotonic() < deadline:
                if self.poll() is not None and not _group_alive(self.pid):
                    break
                time.sleep(0.01)
        if self.poll() is None:
            try:
                self.wait(timeout=5.0)
            except TimeoutError:  # unkillable (D state): report, do not hang
                raise TimeoutError(f"process {self.name!r} (pid {self.pid}) survived SIGKILL for 5 s") from None
        return self.returncode


class ProcessGroup:
    """Owns every process a run starts; a context manager that stops them all on exit."""

    def __init__(self, state_cb: Callable[[int], None] | None = None):
        self._state_cb = state_cb
        self.procs: list[Proc] = []

    def spawn(
        self,
        name: str,
        argv: list[str],
        netns: str | None = None,
        stdout: Path | None = None,
        stderr: Path | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Proc:
        """Start ``argv`` (inside named namespace ``netns`` if given) as the leader of a new session.

        stdout/stderr go to the given files (truncated), else to /dev/null. ``env`` is added to this process's
        environment. Raises CommandError if the executable cannot be started.
        """
        full = netns_argv(argv, netns)
        files: list[IO[bytes]] = []
        try:
            out = open(stdout, "wb") if stdout else subprocess.DEVNULL  # noqa: SIM115 (closed in finally)
            if stdout:
                files.append(out)  # type: ignore[arg-type]
            err = open(stderr, "wb") if stderr else subprocess.DEVNULL  # noqa: SIM115 (closed in finally)
            if stderr:
                files.append(err)  # type: ignore[arg-type]
            full_env = {**os.environ, **env} if env else None
            try:
                popen = subprocess.Popen(
                    full,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=full_env,
                    cwd=cwd,
                    start_new_session=True,
                    preexec_fn=_default_signals,  # two signal() calls in the child, no locks taken
                )
            except OSError as exc:
                raise CommandError(full, 127, str(exc)) from None
        finally:
            for fh in files:
                fh.close()
        proc = Proc(name, full, popen, stdout, stderr)
        self.procs.append(proc)
        if self._state_cb is not None:
            self._state_cb(proc.pid)
        return proc

    def running(self) -> list[Proc]:
        return [p for p in self.procs if p.poll() is None]

    def stop_all(self, grace: float = 2.0) -> None:
        """Stop every process in reverse spawn order (INT -> TERM -> KILL per group) and reap them.

        Signals all still-running groups at each stage together so the total time is about 2 x grace, not
        2 x grace per process; raises TimeoutError only for a process that survives SIGKILL.
        """
        procs = list(reversed(self.procs))
        for sig in (signal.SIGINT, signal.SIGTERM):
            live = [p for p in procs if p.poll() is None or _group_alive(p.pid)]
            if not live:
                break
            for p in live:
                p.signal_group(sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(p.poll() is None or _group_alive(p.pid) for p in live):
                time.sleep(0.01)
        errors: list[str] = []
        for p in procs:
            try:
                p.stop(grace=0.0) if (p.poll() is None or _group_alive(p.pid)) else None
            except TimeoutError as exc:
                errors.append(str(exc))
        if errors:
            raise TimeoutError("; ".join(errors))

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()
