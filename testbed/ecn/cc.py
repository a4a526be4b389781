"""Congestion control for a run: make each wanted algorithm usable, set namespace defaults, undo on close.

dctcp comes from the kernel (tcp_dctcp, loaded with modprobe when it is a module) or, where the kernel has none,
from the project's BPF struct_ops DCTCP (bpf/dctcp.bpf.c), registered under a per-run name ``dctcp_<prefix>``
so that concurrent runs never collide. The root namespace's tcp_allowed_congestion_control is extended for the
run and restored to its exact original text by ``close``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from testbed.ecn.build import DCTCP_NAME_PLACEHOLDER
from testbed.ecn.errors import EcnError
from testbed.ecn.sysrun import run, sysctl_read, sysctl_write, tool

AVAILABLE = "net.ipv4.tcp_available_congestion_control"
ALLOWED = "net.ipv4.tcp_allowed_congestion_control"
KNOWN = ("reno", "cubic", "bbr", "dctcp")


def available() -> list[str]:
    return sysctl_read(AVAILABLE).split()


def _modprobe(cc: str) -> bool:
    try:
        res = run([tool("modprobe"), "-q", f"tcp_{cc}"], check=False)
    except EcnError:
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

    def __init__(self, prefix: str, build_dir: Path):
        self.prefix = prefix
        self.build_dir = Path(build_dir)
        self.names: dict[str, str] = {}  # algorithm -> kernel name to use (sysctl, TCP_CONGESTION, iperf3 -C)
        self.sources: dict[str, str] = {}
        self._allowed_orig: str | None = None
        self._struct_ops_id: int | None = None
        self._obj_copy: Path | None = None

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
                f"no tcp_dctcp in this kernel and {obj} is missing: build it with `python3 -m testbed.ecn.build`"
            )
        name = f"dctcp_{self.prefix}"
        if len(name) > len(DCTCP_NAME_PLACEHOLDER):
            raise EcnError(f"prefix {self.prefix!r} too long for a congestion-control name (15 characters at most)")
        data = obj.read_bytes()
        if data.count(DCTCP_NAME_PLACEHOLDER) != 1:
            raise EcnError(f"{obj}: DCTCP name placeholder not found once; rebuild with `python3 -m testbed.ecn.build`")
        copy = self.build_dir / f"dctcp-{self.prefix}.bpf.o"
        copy.write_bytes(data.replace(DCTCP_NAME_PLACEHOLDER, name.encode().ljust(len(DCTCP_NAME_PLACEHOLDER), b"\0")))
        self._obj_copy = copy
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
        current = sysctl_read(ALLOWED)
        if self._allowed_orig is None:
            self._allowed_orig = current
        missing = [n for n in names if n not in current.split()]
        if missing:
            sysctl_write(ALLOWED, " ".join(current.split() + missing))

    def set_namespace_default(self, netns: str, cc: str, ecn: bool) -> None:
        """net.ipv4.tcp_congestion_control and tcp_ecn inside the namespace (they die with it)."""
        sysctl_write("net.ipv4.tcp_congestion_control", self.kernel_name(cc), netns)
        sysctl_write("net.ipv4.tcp_ecn", "1" if ecn else "0", netns)

    def close(self, wait_s: float = 10.0) -> None:
        """Unregister the struct_ops DCTCP, restore the allowed list exactly. Call after the run's namespaces are
        deleted: a namespace whose default is the BPF DCTCP keeps it alive; we wait up to ``wait_s`` for it to go
        and raise EcnError if it does not."""
        sid, self._struct_ops_id = self._struct_ops_id, None
        if sid is not None:
            run([tool("bpftool"), "struct_ops", "unregister", "id", str(sid)], check=False)
        if self._allowed_orig is not None:
            sysctl_write(ALLOWED, self._allowed_orig)
            now = sysctl_read(ALLOWED)
            if now != self._allowed_orig:
                raise EcnError(f"{ALLOWED} is {now!r} after restoring {self._allowed_orig!r}")
            self._allowed_orig = None
        if self._obj_copy is not None:
            self._obj_copy.unlink(missing_ok=True)
            self._obj_copy = None
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
