"""What a run owns, written down as it is created, so that a crashed run can be cleaned by ownership.

A live run holds an exclusive ``flock`` on ``/run/testbed/lock`` (a second run is refused, or waits when asked
to) and keeps ``/run/testbed/<prefix>.json`` up to date with everything it created: named namespaces, process
ids, root-namespace sysctls it changed (with their original values), BPF pins and struct_ops maps. A global change
is written down before it is made (a sysctl's words, a struct_ops by the name it registers, a pin's path), so a
run killed between the two is cleaned too; what can only be named afterwards (a process id) is written at once,
and a namespace also carries the run's prefix. ``clean()`` undoes what those files name for runs that are no
longer alive, and deletes namespaces named with a dead run's prefix (``tb<4 hex>-...``). It never matches anything
else.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.host import netns, structops
from testbed.host.staging import PREFIX, STAGE_ROOT, recover

STATE_DIR_ENV = "TESTBED_STATE_DIR"  # moves the state files and the run lock (an entry reads it: use_state_dir)
DEFAULT_STATE_DIR = Path("/run/testbed")
STATE_DIR = DEFAULT_STATE_DIR  # this process's: the entries set it once, from their environment
PREFIX_RE = re.compile(r"^tb[0-9a-f]{4}$")
NETNS_RE = re.compile(r"^(tb[0-9a-f]{4})-[A-Za-z0-9_]+$")


def state_dir(env: Mapping[str, str]) -> Path:
    """Where the runs' state files and the run lock live: ``$TESTBED_STATE_DIR`` in the entry's ``env``, else
    /run/testbed."""
    return Path(env.get(STATE_DIR_ENV, str(DEFAULT_STATE_DIR)))


def use_state_dir(env: Mapping[str, str]) -> Path:
    """Set this process's state directory from its entry's environment (the CLI, the API, the pytest plugin and the
    processes started as programs call it once, before anything locks, records or cleans a run); the directory."""
    global STATE_DIR
    STATE_DIR = state_dir(env)
    return STATE_DIR


class BusyError(TestbedError, RuntimeError):
    """Another run holds the machine."""


@dataclass
class RunState:
    prefix: str
    pid: int
    started: float
    namespaces: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    # root-namespace sysctls: {"key", "original"} to restore, or {"key", "remove_words"} for a list it extended
    sysctls: list[dict[str, str]] = field(default_factory=list)
    bpf_pins: list[str] = field(default_factory=list)
    # struct_ops maps to unregister: "cc NAME" (written before registering: found by name) or "id N"
    struct_ops: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.prefix}.json"

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, self.path)

    def add(self, kind: str, value: Any) -> None:
        getattr(self, kind).append(value)
        self.save()

    @classmethod
    def load(cls, path: Path) -> RunState:
        return cls(**json.loads(path.read_text()))


class RunLock:
    """The machine-wide lock of a live run, and its state file."""

    def __init__(self, wait: float = 0.0, label: str = ""):
        self.wait = wait
        self.label = label  # said after "<prefix> pid N" to whoever waits on the lock (e.g. "guest-kernel run")
        self._fd: int | None = None
        self.state: RunState | None = None

    def __enter__(self) -> RunState:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(STATE_DIR / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    os.close(fd)
                    holder = _lock_holder()
                    raise BusyError(
                        f"another testbed run is active ({holder}); wait for it to finish, or run "
                        "`python3 -m testbed clean` if it crashed (runs on one machine share its two cores, so they "
                        "run one at a time)"
                    ) from None
                time.sleep(0.2)
        self._fd = fd
        clean(quiet=True)  # whatever a crashed run left, before this one starts
        prefix = new_prefix()
        os.ftruncate(fd, 0)
        os.write(fd, f"{prefix} pid {os.getpid()}{' ' + self.label if self.label else ''}\n".encode())
        self.state = RunState(prefix, os.getpid(), time.time())
        self.state.save()
        return self.state

    def __exit__(self, *exc: object) -> None:
        if self.state is not None:
            self.state.path.unlink(missing_ok=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _lock_holder() -> str:
    try:
        return (STATE_DIR / "lock").read_text().strip() or "unknown holder"
    except OSError:
        return "unknown holder"


def new_prefix() -> str:
    taken = {p.stem for p in STATE_DIR.glob("tb*.json")} | {m.group(1) for m in map(NETNS_RE.match, list_netns()) if m}
    while True:
        prefix = "tb" + secrets.token_hex(2)
        if prefix not in taken:
            return prefix


def list_netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def delete_netns(name: str, wait_s: float = 5.0) -> None:
    """``delete_namespaces`` of one namespace."""
    delete_namespaces([name], wait_s)


def delete_namespaces(names: list[str], wait_s: float = 5.0) -> None:
    """Kill every process inside the named namespaces, abort their TCP sockets, then delete them (their interfaces
    go with them), in the order given. Raises, after trying every one, naming those that could not be deleted.

    A killed sender's socket lives on as an orphan that retries its unsent data for minutes after the namespace is
    deleted, and holds what it uses meanwhile (a run's BPF struct_ops DCTCP stays, unfreeable). ``ss -K``
    (SOCK_DESTROY) aborts those sockets while the namespace can still be named; a kernel built without
    CONFIG_INET_DIAG_DESTROY refuses it, and its orphans go when their retries run out. A namespace without any TCP
    socket (a router's) needs no ``ss``.
    """
    for pids in netns.holders(names).values():
        for pid in pids:
            _kill(pid)
    deadline = time.monotonic() + wait_s
    while any(netns.holders(names).values()) and time.monotonic() < deadline:  # a killed process closes its sockets
        time.sleep(0.01)
    failed = []
    for name in names:
        if not (netns.NETNS_DIR / name).exists():  # never attached (a build interrupted before), or gone already
            continue
        try:
            if netns.has_tcp_sockets(name):
                subprocess.run(["ss", "-N", name, "-K", "-t", "-a"], capture_output=True)
            netns.remove(name)
        except OSError as exc:
            failed.append(f"{name}: {exc}")
    if failed:
        raise netns.NetnsError("could not delete " + "; ".join(failed))


def undo(state: RunState, log: list[str]) -> None:
    """Undo what a state file names, in reverse order of creation."""
    for pid in reversed(state.pids):
        if _alive(pid):
            _kill(pid)
            log.append(f"killed pid {pid}")
    present = set(list_netns())
    gone = [ns for ns in reversed(state.namespaces) if ns in present]
    delete_namespaces(gone)  # all at once: one pass over /proc finds their processes
    log += [f"deleted netns {ns}" for ns in gone]
    for so in reversed(state.struct_ops):
        kind, _, what = so.partition(" ")
        ids = structops.registered().get(what, []) if kind == "cc" else [int(what)]
        for sid in ids:
            cp = subprocess.run(["bpftool", "struct_ops", "unregister", "id", str(sid)], capture_output=True, text=True)
            if cp.returncode == 0:
                log.append(f"unregistered struct_ops id {sid} ({so})")
    for pin in reversed(state.bpf_pins):
        p = Path(pin)
        if p.exists():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            log.append(f"removed BPF pin {pin}")
    for item in reversed(state.sysctls):
        key = item["key"]
        path = Path("/proc/sys") / key.replace(".", "/")
        if not path.exists():
            continue
        if "remove_words" in item:  # a list sysctl this run extended: take out only its own words
            words = item["remove_words"].split()
            current = path.read_text().split()
            kept = [w for w in current if w not in words]
            if kept != current:
                path.write_text(" ".join(kept))
                log.append(f"removed {' '.join(words)} from {key}")
        elif path.read_text().strip() != item["original"]:
            path.write_text(item["original"])
            log.append(f"restored {key} = {item['original']}")


def clean(quiet: bool = False) -> list[str]:
    """Remove what dead runs left behind. Returns what was done."""
    log: list[str] = []
    if not STATE_DIR.exists():
        return log
    live: set[str] = set()
    for path in sorted(STATE_DIR.glob("tb*.json")):
        try:
            state = RunState.load(path)
        except (OSError, ValueError, TypeError):
            log.append(f"unreadable state file {path} left alone")
            continue
        if state.pid != os.getpid() and _alive(state.pid) and _holds_lock(state.prefix):
            live.add(state.prefix)
            continue
        undo(state, log)
        path.unlink(missing_ok=True)
        log.append(f"removed state of run {state.prefix}")
    dead = [ns for ns in list_netns() if (m := NETNS_RE.match(ns)) and m.group(1) not in live]
    delete_namespaces(dead)
    log += [f"deleted netns {ns} (prefix of a dead run)" for ns in dead]
    log += clean_stages()
    if not quiet:
        for line in log:
            print(line)
    return log


def clean_stages(root: Path | None = None) -> list[str]:
    """Recover the sampler stages (``staging``) whose owner, the pid in the name, is gone: their rows go into the
    run directory the stage names (``staging.recover``), so a killed run keeps what it sampled."""
    log = []
    for d in sorted((root or STAGE_ROOT).glob(f"{PREFIX}*-*")):
        pid = d.name[len(PREFIX) :].split("-", 1)[0]
        if d.is_dir() and pid.isdigit() and not _alive(int(pid)):
            log.append(f"{recover(d)} (its run, pid {pid}, is gone)")
    return log


def _holds_lock(prefix: str) -> bool:
    return _lock_holder().startswith(prefix + " ")
