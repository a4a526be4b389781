"""The vng command line and the guest shell line (no root, nothing is booted)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from testbed.vm.cli import output_dirs
from testbed.vm.command import READY, VngOptions, build_vng_command, guest_script, parse_ready

IMAGE = Path("/var/lib/testbed/kernels/6.1.0-57-amd64/boot/vmlinux-6.1.0-57-amd64")
VNG = Path("/opt/testbed-vng/bin/vng")


def _opts(**kw: object) -> VngOptions:
    base: dict = {"image": IMAGE, "accel": "tcg", "cwd": Path("/work/main")}
    base.update(kw)
    return VngOptions(**base)


def _value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_tcg_command_has_the_measured_tuning() -> None:
    cmd = build_vng_command(VNG, _opts(), ["uname", "-r"])
    assert cmd[:3] == [str(VNG), "--run", str(IMAGE)]
    assert "--disable-kvm" in cmd and "--force-9p" in cmd
    assert _value(cmd, "--memory") == "2G"
    assert _value(cmd, "--append").split() == ["tsc=reliable", "clocksource=tsc", "mitigations=off"]
    assert _value(cmd, "--cwd") == "/work/main"
    assert "--cpus" not in cmd


def test_kvm_command_does_not_disable_kvm() -> None:
    cmd = build_vng_command(VNG, _opts(accel="kvm", cpus=1, memory="1G"), ["true"])
    assert "--disable-kvm" not in cmd
    assert _value(cmd, "--cpus") == "1" and _value(cmd, "--memory") == "1G"
    with pytest.raises(ValueError):
        build_vng_command(VNG, _opts(accel="hvf"), ["true"])


def test_shared_dirs() -> None:
    cmd = build_vng_command(
        VNG,
        _opts(
            rwdirs=(Path("/work/main/runs"), Path("/tmp/out dir")),
            rodirs=((Path("/usr/lib/udev/rules.d"), Path("/var/lib/testbed/guest-udev-rules")),),
        ),
        ["true"],
    )
    assert "--rwdir=/work/main/runs" in cmd and "--rwdir=/tmp/out dir" in cmd  # one argv item: no shell quoting
    assert "--rodir=/usr/lib/udev/rules.d=/var/lib/testbed/guest-udev-rules" in cmd


def test_exec_is_the_last_option_and_quotes_the_command() -> None:
    argv = ["/usr/bin/python3", "-c", "print('a b'); import sys; sys.exit(3)"]
    cmd = build_vng_command(VNG, _opts(env={"TESTBED_GUEST": "1"}), argv)
    assert cmd[-2] == "--exec"
    script = cmd[-1]
    assert script.endswith("exec " + shlex.join(argv))
    assert "TESTBED_GUEST=1" in script and "PATH=/usr/local/sbin:" in script and ".pyenv" not in script


def test_guest_script_runs_in_a_shell_with_the_ready_marker_first() -> None:
    # Run the guest line on the host's /bin/sh: same shell semantics as inside the guest.
    argv = ["sh", "-c", 'echo "$TESTBED_GUEST_ACCEL $1"; exit 7', "x", "it's"]
    res = subprocess.run(
        ["sh", "-c", guest_script(argv, {"TESTBED_GUEST_ACCEL": "tcg"})], capture_output=True, text=True
    )
    lines = res.stdout.splitlines()
    assert res.returncode == 7
    assert parse_ready(lines[0]) is not None and parse_ready(lines[0]) >= 0
    assert lines[1] == "tcg it's"


def test_guest_script_needs_a_command() -> None:
    with pytest.raises(ValueError):
        guest_script([], {})


def test_parse_ready() -> None:
    assert parse_ready(f"{READY} 4.05\n") == pytest.approx(4.05)
    assert parse_ready("hello 4.05") is None
    assert parse_ready(f"{READY} soon") is None
    assert parse_ready(f"{READY} 4.05 extra") is None


def test_output_dirs_are_found_in_the_command() -> None:
    cmd = ["python3", "-m", "testbed", "run", "s.yaml", "-o", "/tmp/a", "--output=/tmp/b", "--other", "x"]
    assert output_dirs(cmd) == [Path("/tmp/a"), Path("/tmp/b")]
    assert output_dirs(["pytest", "-q"]) == []
    assert output_dirs(["cmd", "-o"]) == []


def test_host_settings_are_forwarded_to_the_guest(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TESTBED_SCENARIO_RUNS, TESTBED_RETAKES, TESTBED_REVERSED reach the guest's pytest; the runs dir is shared."""
    from testbed.vm.guest import forwarded_env

    env, dirs = forwarded_env({"TESTBED_SCENARIO_RUNS": str(tmp_path / "r"), "TESTBED_REVERSED": "1", "HOME": "/x"})
    assert env == {"TESTBED_SCENARIO_RUNS": str(tmp_path / "r"), "TESTBED_REVERSED": "1"}
    assert dirs == [tmp_path / "r"]
    assert forwarded_env({}) == ({}, [])
