"""sysctls: per-namespace settings (gone with the namespace) and root-namespace ones (restored, and recorded in
the run's state file first so that `testbed clean` restores them after a crash)."""

from __future__ import annotations

from pathlib import Path

from testbed.ownership import RunState
from testbed.procs import run_checked


def set_in_netns(netns: str, values: dict[str, str]) -> None:
    """Set sysctls inside a named namespace, all in one `sysctl` call; any failure raises with its message."""
    if values:
        run_checked(["ip", "netns", "exec", netns, "sysctl", "-q", "-w", *(f"{k}={v}" for k, v in values.items())])


def _path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def read_root(key: str) -> str:
    return _path(key).read_text().strip()


class RootSysctls:
    """Root-namespace sysctls changed by one run; ``restore()`` puts back exactly what was there."""

    def __init__(self, state: RunState | None):
        self.state = state
        self._original: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        if key not in self._original:
            original = read_root(key)
            self._original[key] = original
            if self.state is not None:
                self.state.add("sysctls", {"key": key, "original": original})
        _path(key).write_text(value)

    def restore(self) -> None:
        for key, original in reversed(list(self._original.items())):
            if read_root(key) != original:
                _path(key).write_text(original)
        self._original.clear()
