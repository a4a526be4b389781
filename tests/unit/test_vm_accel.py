"""KVM probe decisions with stand-in QEMU binaries (no root, no QEMU)."""

from __future__ import annotations

from pathlib import Path

from testbed.vm.accel import choose_accel, probe_kvm


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
