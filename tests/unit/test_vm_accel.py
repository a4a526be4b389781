"""KVM probe decisions with stand-in QEMU binaries (no root, no QEMU)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from testbed.vm.accel import choose_accel, probe_kvm

REPO = Path(__file__).resolve().parents[2]


def _fake_qemu(tmp_path: Path, body: str) -> Path:
    q = tmp_path / "qemu-system-x86_64"
    q.write_text("#!/bin/sh\n" + body + "\n")
    q.chmod(0o755)
    return q


def _kvm_dev(tmp_path: Path) -> str:
    dev = tmp_path / "kvm"
    dev.write_text("")
    return str(dev)


def test_qemu_that_aborts_at_once_means_tcg(tmp_path: Path) -> None:
    q = _fake_qemu(tmp_path, 'echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2; exit 134')
    a = probe_kvm(q, _kvm_dev(tmp_path))
    assert a.name == "tcg" and "failed to set MSR 0x10a" in a.reason


def test_qemu_that_keeps_running_means_kvm(tmp_path: Path) -> None:
    q = _fake_qemu(tmp_path, "exec sleep 30")
    assert probe_kvm(q, _kvm_dev(tmp_path)).name == "kvm"


def test_no_kvm_device_means_tcg(tmp_path: Path) -> None:
    q = _fake_qemu(tmp_path, "exec sleep 30")
    a = probe_kvm(q, str(tmp_path / "missing"))
    assert a.name == "tcg" and "no usable" in a.reason


def test_explicit_choice_skips_the_probe(tmp_path: Path) -> None:
    q = tmp_path / "does-not-exist"
    assert choose_accel(q, "tcg").name == "tcg"
    assert choose_accel(q, "kvm").name == "kvm"


PROBING = """\
import sys
from pathlib import Path
from testbed.vm import accel
from testbed.vm.guest import sigterm_raises
accel.PROBE_S = 600
with sigterm_raises():
    accel.probe_kvm(Path(sys.argv[1]), sys.argv[2])
"""


def test_sigterm_while_probing_kills_the_probe(tmp_path: Path) -> None:
    """The probe's QEMU runs in a session of its own and, where KVM works, sits in the BIOS until killed: SIGTERM to
    the process probing (under run_in_guest's SIGTERM handler) must take the probe with it."""
    pid_file = tmp_path / "probe.pid"
    q = _fake_qemu(tmp_path, f"echo $$ > {pid_file}.new; mv {pid_file}.new {pid_file}; exec sleep 600")
    child = subprocess.Popen([sys.executable, "-c", PROBING, str(q), _kvm_dev(tmp_path)], cwd=REPO)
    probe = 0
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid_file.exists(), f"the stand-in QEMU never started (prober exit {child.poll()})"
        probe = int(pid_file.read_text())
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 128 + signal.SIGTERM
        assert not Path(f"/proc/{probe}").exists(), "the probe's QEMU was left running"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if probe and Path(f"/proc/{probe}").exists():
            os.kill(probe, signal.SIGKILL)
