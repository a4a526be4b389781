"""The guest-kernel mode for real: boot Debian's stock kernel under QEMU, run commands, check what it offers.

Each boot costs ~8 s under TCG plus the command (measured here); the first run also fetches the kernel package
(~20 s). Skipped inside a guest (no nested guests).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from testbed.vm import GuestTimeout, run_in_guest
from testbed.vm.guest import session_pids
from testbed.vm.kernel import ensure_kernel

pytestmark = [
    pytest.mark.root,
    pytest.mark.stock_kernel,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (QEMU, apt, the kernel cache)"),
    pytest.mark.skipif(os.environ.get("TESTBED_GUEST") == "1", reason="already inside a guest: no nested guests"),
]

REPO = Path(__file__).resolve().parents[2]


def test_stock_kernel_boots_and_has_red_ecn_netem_fq_codel_dctcp(tmp_path: Path) -> None:
    kernel = ensure_kernel("debian-6.1")
    out = tmp_path / "out"
    record = REPO / "runs" / f".tbvm-test-{os.getpid()}"  # runs/ is always shared: records land on the host
    script = (
        f"uname -r; echo written > {out}/from-guest.txt; echo record > {record}; /usr/bin/python3 -m testbed.vm.check"
    )
    res = run_in_guest(["sh", "-c", script], kernel="debian-6.1", rwdirs=[out], timeout=300, cwd=REPO, stream=False)
    assert res.rc == 0, res.output
    assert res.output.splitlines()[0] == kernel.version == res.kernel_version
    assert re.fullmatch(r"6\.1\.0-\d+-amd64", kernel.version)
    for feature in ("red+ecn", "netem", "fq_codel", "tcp_dctcp"):
        assert re.search(rf"^\s+{re.escape(feature)}\s+ok$", res.output, re.M), res.output
    assert (out / "from-guest.txt").read_text() == "written\n"  # the rwdir is the host's
    assert record.read_text() == "record\n"
    record.unlink()
    assert res.accel in ("kvm", "tcg") and res.accel_reason
    assert 0 < res.boot_s < res.wall_s


def test_command_exit_code_comes_back_and_the_rest_is_read_only(tmp_path: Path) -> None:
    probe = REPO / "tbd5-should-not-exist"
    res = run_in_guest(["sh", "-c", f"touch {probe} || exit 42; exit 7"], timeout=300, cwd=REPO, stream=False)
    # virtme-ng lays throw-away overlays over /tmp, /home, /opt, /var, ...: a checkout there (CI clones anywhere) is
    # writable in the guest (exit 7) but the write must not reach the host; elsewhere / is read-only (exit 42)
    assert res.rc in (7, 42), f"the command's exit code did not come back: {res.rc}: {res.output}"
    if res.rc == 42:
        assert "Read-only file system" in res.output
    assert not probe.exists(), "a write in the guest reached the host"


def test_guest_timeout_fails_clearly_and_leaves_nothing_running() -> None:
    with pytest.raises(GuestTimeout, match=r"timed out after 3 s") as err:
        run_in_guest(["sleep", "600"], timeout=3, stream=False)
    assert err.value.sid > 0
    assert session_pids(err.value.sid) == []


def test_an_unavailable_kernel_package_fails_clearly_before_any_guest(tmp_path: Path) -> None:
    """A version the archive does not have: exit 2 with one line naming the package, no QEMU started."""
    import sys

    before = _qemu_pids()
    res = subprocess.run(
        [sys.executable, "-m", "testbed", "vm", "--kernel", "6.1.0-999-amd64", "--", "true"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TESTBED_KERNEL_CACHE": str(tmp_path)},
    )
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "linux-image-6.1.0-999-amd64" in res.stderr and "unavailable" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert _qemu_pids() <= before


def test_sigterm_to_testbed_vm_kills_the_guest(tmp_path: Path) -> None:
    """The bug: SIGTERM to `testbed vm` ended it but left vng, virtme-run and QEMU running in their own session.

    The test waits for its own guest: a QEMU under the `testbed vm` it started that boots a kernel. Without a
    cached accelerator choice, testbed.vm.accel first runs a QEMU of its own for a moment (no kernel, no boot
    device), which is not the guest."""
    import signal
    import sys
    import time

    err = tmp_path / "vm.stderr"
    with err.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "testbed", "vm", "--", "sleep", "600"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
        )
    try:
        t0 = time.monotonic()
        while not _guest_qemu_pids(proc.pid) and time.monotonic() < t0 + START_S and proc.poll() is None:
            time.sleep(0.2)
        started = _guest_qemu_pids(proc.pid)
        assert started, _no_qemu(proc, err, time.monotonic() - t0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) != 0
        assert not (_qemu_pids() & started), "QEMU left running after SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


START_S = 900  # a guest starts in seconds once QEMU and the kernel are here; the first use installs them first


def _no_qemu(proc: subprocess.Popen[bytes], err: Path, waited: float) -> str:
    """Why no guest QEMU appeared: the command's exit code (or that it still ran), its stderr, the run lock's
    holder, and the QEMUs there were (the accel probe's among them, if it was still running)."""
    state = f"exited {proc.returncode}" if proc.poll() is not None else "still running"
    lock = Path("/run/testbed/lock")
    holder = lock.read_text().strip() if lock.exists() else "(no lock file)"
    qemus = {pid: _argv(pid) for pid in _qemu_pids()}
    return (
        f"no guest QEMU after {waited:.0f} s; testbed vm {state}; run lock: {holder!r}; QEMUs: {qemus}; "
        f"stderr: {err.read_text()[-2000:]!r}"
    )


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # fields after "comm)": state ppid ...


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        pid = _parent(pid)
        if pid == ancestor:
            return True
    return False


def _guest_qemu_pids(ancestor: int) -> set[int]:
    """QEMUs under ``ancestor`` that boot a kernel (``-kernel``): a guest, not the accel probe."""
    return {pid for pid in _qemu_pids() if _descends_from(pid, ancestor) and "-kernel" in _argv(pid)}


def _qemu_pids() -> set[int]:
    pids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().startswith("qemu-system"):
                    pids.add(int(d.name))
            except OSError:
                continue
    return pids
