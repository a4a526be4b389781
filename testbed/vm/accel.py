"""KVM where it works, software emulation (TCG) where it does not.

``/dev/kvm`` being there is not enough: on some hosts QEMU aborts at once under KVM ("failed to set MSR 0x10a",
docs/vm.md). The probe starts QEMU with ``-accel kvm -cpu host`` and no boot device: if it is still
running after ``PROBE_S`` (sitting in the BIOS) KVM works; if it exits first, it does not. The answer is cached
per host boot in /run/testbed/ (tmpfs), keyed by host kernel and QEMU binary.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROBE_S = 1.5
CACHE = Path("/run/testbed/vm-accel.json")


@dataclass(frozen=True)
class Accel:
    name: str  # "kvm" or "tcg"
    reason: str  # why, one line


def _key(qemu: Path) -> str:
    st = qemu.stat()
    return f"{platform.release()}|{qemu}|{st.st_size}|{int(st.st_mtime)}"


def probe_kvm(qemu: Path, kvm_dev: str = "/dev/kvm") -> Accel:
    """Try KVM for real (no cache)."""
    if not os.access(kvm_dev, os.R_OK | os.W_OK):
        return Accel("tcg", f"no usable {kvm_dev}")
    cmd = [str(qemu), "-accel", "kvm", "-cpu", "host", "-display", "none", "-nodefaults", "-no-reboot", "-m", "64M"]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=PROBE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return Accel("kvm", "KVM works (probe ran)")
    except BaseException:  # SIGTERM (run_in_guest raises on it), Ctrl-C: the probe, in its own session, gets neither
        proc.kill()
        proc.wait()
        raise
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    why = lines[0] if lines else f"exit {proc.returncode}"
    return Accel("tcg", f"KVM cannot run a guest here ({why.removeprefix('qemu-system-x86_64: ')})")


def choose_accel(qemu: Path, want: str = "auto") -> Accel:
    """``want`` is auto, kvm or tcg; auto probes once per host boot."""
    if want == "tcg":
        return Accel("tcg", "software emulation requested")
    if want == "kvm":
        return Accel("kvm", "KVM requested")
    key = _key(qemu)
    try:
        cached = json.loads(CACHE.read_text())
        if cached.get("key") == key:
            return Accel(cached["name"], cached["reason"])
    except (OSError, ValueError, KeyError):
        pass
    accel = probe_kvm(qemu)
    try:
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_text(json.dumps({"key": key, "name": accel.name, "reason": accel.reason}) + "\n")
    except OSError:
        pass
    return accel
