"""Running the system tools of the BPF loaders (tc, bpftool, sysctl), in the root or a named network namespace.

Commands in a namespace run under ``nsenter --net=/run/netns/NAME``: it switches the network namespace only, so
/sys/fs/bpf (pinned programs) stays visible, unlike ``ip netns exec`` / ``tc -n``, which remount /sys.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from testbed.bpf.errors import BpfError

BPFFS = Path("/sys/fs/bpf")


def tool(name: str) -> str:
    path = shutil.which(name) or next(
        (f"{d}/{name}" for d in ("/usr/sbin", "/sbin") if Path(f"{d}/{name}").exists()), None
    )
    if not path:
        raise BpfError(f"{name} not found (apt-get install {'bpftool' if name == 'bpftool' else 'iproute2'})")
    return path


def netns_prefix(netns: str | None) -> list[str]:
    if netns is None:
        return []
    path = Path("/run/netns") / netns
    if not path.exists():
        raise BpfError(f"network namespace {netns!r} does not exist ({path})")
    return [tool("nsenter"), f"--net={path}"]


def run(
    cmd: list[str], netns: str | None = None, check: bool = True, timeout: float = 20.0
) -> subprocess.CompletedProcess[str]:
    full = netns_prefix(netns) + cmd
    res = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        where = f" in {netns}" if netns else ""
        raise BpfError(
            f"`{' '.join(cmd)}`{where} failed ({res.returncode}): {(res.stderr or res.stdout).strip()[-1500:]}"
        )
    return res


def ensure_bpffs() -> None:
    """Mount the BPF filesystem at /sys/fs/bpf when it is not (systemd does this on a normal boot; left mounted)."""
    mounts = Path("/proc/mounts").read_text().split("\n")
    if any(len(f) > 2 and f[1] == str(BPFFS) and f[2] == "bpf" for f in (m.split() for m in mounts)):
        return
    run(["mount", "-t", "bpf", "bpf", str(BPFFS)])


def sysctl_read(key: str, netns: str | None = None) -> str:
    if netns is None:
        return Path("/proc/sys", *key.split(".")).read_text().strip()
    return run(["sysctl", "-n", key], netns).stdout.strip()


def sysctl_write(key: str, value: str, netns: str | None = None) -> None:
    if netns is None:
        try:
            Path("/proc/sys", *key.split(".")).write_text(value)
        except OSError as exc:
            raise BpfError(f"cannot set {key}={value!r}: {exc}") from None
        return
    run(["sysctl", "-qw", f"{key}={value}"], netns)


def detach_tc(netns: str, dev: str, hook: str, prio: str, clsact_ours: bool) -> None:
    """Undo a pinned program's tc attach: the clsact qdisc if this run added it, else only the program's filter
    (nothing once the namespace is gone: its devices went with it)."""
    if not Path("/run/netns", netns).exists():
        return
    if clsact_ours:
        run(["tc", "qdisc", "del", "dev", dev, "clsact"], netns, check=False)
    else:
        run(["tc", "filter", "del", "dev", dev, hook, "prio", prio], netns, check=False)


def unpin(fd: int, pin_dir: Path) -> int:
    """Close a map fd (if open) and remove its pins (unlinking bpffs pins is plain unlink/rmdir); returns -1."""
    if fd >= 0:
        os.close(fd)
    shutil.rmtree(pin_dir, ignore_errors=True)
    return -1


def remove_empty(*dirs: Path) -> None:
    """Remove each directory, in order, that exists and is empty (a run's pin root, then its parent)."""
    for d in dirs:
        if d.exists() and not any(d.iterdir()):
            d.rmdir()
