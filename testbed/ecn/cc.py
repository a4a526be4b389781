"""Congestion control for a run: make each wanted algorithm usable, set namespace defaults, undo on close.

dctcp comes from the kernel (tcp_dctcp, loaded with modprobe when it is a module) or, where the kernel has none,
from the project's BPF struct_ops DCTCP (testbed/bpf/src/dctcp.bpf.c), registered under a per-run name
``dctcp_<prefix>`` so that concurrent runs never collide. The root namespace's tcp_allowed_congestion_control is
extended with the names a run needs and ``close`` removes exactly the names this run added (under a machine-wide
flock), so two managers alive at once (a run and a test, say) never restore each other's stale snapshot.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from testbed.bpf.build import DCTCP_NAME_PLACEHOLDER
from testbed.bpf.errors import BpfError
from testbed.bpf.sysrun import run, sysctl_read, sysctl_write, tool
from testbed.ecn.errors import EcnError

AVAILABLE = "net.ipv4.tcp_available_congestion_control"
ALLOWED = "net.ipv4.tcp_allowed_congestion_control"
KNOWN = ("reno", "cubic", "bbr", "dctcp")
LOCK = Path("/run/testbed/allowed-cc.lock")


@contextlib.contextmanager
def _allowed_lock() -> Iterator[None]:
    """Serializes read-modify-write of the root allowed list between processes."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def remove_allowed(names: list[str]) -> None:
    """Take ``names`` out of the root allowed list (what one run added), leaving everything else as it is."""
    with _allowed_lock():
        current = sysctl_read(ALLOWED).split()
        kept = [n for n in current if n not in names]
        if kept != current:
            sysctl_write(ALLOWED, " ".join(kept))
        left = [n for n in sysctl_read(ALLOWED).split() if n in names]
    if left:
        raise EcnError(f"{ALLOWED} still lists {left} after removing what this run added")


def available() -> list[str]:
    return sysctl_read(AVAILABLE).split()


def _modprobe(cc: str) -> bool:
    try:
        res = run([tool("modprobe"), "-q", f"tcp_{cc}"], check=False)
    except BpfError:
        return False
    return res.returncode == 0 and cc in available()


def struct_ops_ids() -> dict[int, str]:
    """Registered struct_ops maps: id -> map name (bpftool struct_ops show)."""
    import json

    res = run([tool("bpftool"), "-j", "struct_ops", "show"], check=False)
    if res.returncode != 0 or not res.stdout.strip():
        return {}
    return {int(m["id"]): str(m["name"]) for m in json.loads(res.stdout)}


class CongestionControl:
    """Per-run congestion-control manager; ``close`` is idempotent."""

    def __init__(self, prefix: str, build_dir: Path, intent: Callable[[str, Any], None] | None = None):
        """``intent(kind, value)`` is told each global change before it is made (the run's state file: a run killed
        between the two is still cleaned): ("sysctls", {"key", "remove_words"}) and ("struct_ops", "cc NAME")."""
        self.prefix = prefix
        self._intent = intent or (lambda kind, value: None)
        self.build_dir = Path(build_dir)
        self.names: dict[str, str] = {}  # algorithm -> kernel name to use (sysctl, TCP_CONGESTION, iperf3 -C)
        self.sources: dict[str, str] = {}
        self.added: list[str] = []  # names this manager put into the root allowed list (close removes them)
        self._struct_ops_id: int | None = None

    @property
    def struct_ops_id(self) -> int | None:
        """The id of the BPF struct_ops DCTCP this manager registered (for `testbed clean`), None if none."""
        return self._struct_ops_id

    def kernel_name(self, cc: str) -> str:
        if cc not in self.names:
            raise EcnError(f"congestion control {cc!r} was not prepared for this run (call prepare first)")
        return self.names[cc]

    def prepare(self, wanted: set[str]) -> dict[str, str]:
        """Make each algorithm usable; return algorithm -> "kernel" | "bpf"."""
        unknown = sorted(set(wanted) - set(KNOWN))
        if unknown:
            raise EcnError(f"unknown congestion control {unknown[0]!r} (known: {', '.join(KNOWN)})")
        try:
            for cc in sorted(wanted):
                if cc in self.names:
                    continue
                if cc in available() or _modprobe(cc):
                    self.names[cc], self.sources[cc] = cc, "kernel"
                elif cc == "dctcp":
                    self.names[cc], self.sources[cc] = self._register_dctcp(), "bpf"
                else:
                    raise EcnError(f"congestion control {cc!r} is not in this kernel and no module tcp_{cc} loads")
            self._allow(sorted(self.names.values()))
        except BaseException:
            self.close()
            raise
        return dict(self.sources)

    def _register_dctcp(self) -> str:
        obj = self.build_dir / "dctcp.bpf.o"
        if not obj.exists():
            raise EcnError(
                f"no tcp_dctcp in this kernel and {obj} is missing: build it with `python3 -m testbed.bpf.build`"
            )
        name = f"dctcp_{self.prefix}"
        if len(name) > len(DCTCP_NAME_PLACEHOLDER):
            raise EcnError(f"prefix {self.prefix!r} too long for a congestion-control name (15 characters at most)")
        data = obj.read_bytes()
        if data.count(DCTCP_NAME_PLACEHOLDER) != 1:
            raise EcnError(f"{obj}: DCTCP name placeholder not found once; rebuild with `python3 -m testbed.bpf.build`")
        # the renamed copy lives only while bpftool registers it (the kernel keeps the registration): a per-run
        # file beside the build would be left behind by every killed run
        with tempfile.TemporaryDirectory(prefix=f"{self.prefix}-dctcp-") as tmp:
            copy = Path(tmp) / "dctcp.bpf.o"
            copy.write_bytes(
                data.replace(DCTCP_NAME_PLACEHOLDER, name.encode().ljust(len(DCTCP_NAME_PLACEHOLDER), b"\0"))
            )
            self._intent("struct_ops", f"cc {name}")
            res = run([tool("bpftool"), "struct_ops", "register", str(copy)], check=False)
        m = re.search(r"Registered tcp_congestion_ops \S+ id (\d+)", res.stdout + res.stderr)
        if res.returncode != 0 or not m:
            raise EcnError(
                "registering the BPF struct_ops DCTCP failed (needs a kernel with BPF struct_ops for "
                f"tcp_congestion_ops, Linux >= 5.6 with BTF): {(res.stderr or res.stdout).strip()[-1200:]}"
            )
        self._struct_ops_id = int(m.group(1))
        if name not in available():
            raise EcnError(f"struct_ops DCTCP registered (id {m.group(1)}) but {name} is not in {AVAILABLE}")
        return name

    def _allow(self, names: list[str]) -> None:
        with _allowed_lock():
            current = sysctl_read(ALLOWED).split()
            missing = [n for n in names if n not in current]
            if missing:
                self._intent("sysctls", {"key": ALLOWED, "remove_words": " ".join(missing)})
                sysctl_write(ALLOWED, " ".join(current + missing))
                self.added += missing

    def namespace_defaults(self, cc: str, ecn: bool) -> dict[str, str]:
        """A namespace's net.ipv4.tcp_congestion_control and tcp_ecn for ``cc`` (its kernel name in this run)."""
        return {"net.ipv4.tcp_congestion_control": self.kernel_name(cc), "net.ipv4.tcp_ecn": "1" if ecn else "0"}

    def set_namespace_default(self, netns: str, cc: str, ecn: bool) -> None:
        """net.ipv4.tcp_congestion_control and tcp_ecn inside the namespace (they die with it)."""
        for key, value in self.namespace_defaults(cc, ecn).items():
            sysctl_write(key, value, netns)

    def close(self, wait_s: float = 10.0) -> None:
        """Unregister the struct_ops DCTCP, restore the allowed list exactly. Call after the run's namespaces are
        deleted: a namespace whose default is the BPF DCTCP keeps it alive; we wait up to ``wait_s`` for it to go
        and raise EcnError if it does not."""
        sid, self._struct_ops_id = self._struct_ops_id, None
        if sid is not None:
            run([tool("bpftool"), "struct_ops", "unregister", "id", str(sid)], check=False)
        if self.added:
            added, self.added = self.added, []
            remove_allowed(added)
        self.names.clear()
        self.sources.clear()
        if sid is not None:
            deadline = time.monotonic() + wait_s
            while sid in struct_ops_ids():
                if time.monotonic() > deadline:
                    raise EcnError(
                        f"struct_ops DCTCP id {sid} still exists {wait_s:g} s after unregistering "
                        "(a namespace or socket still uses it)"
                    )
                time.sleep(0.05)
