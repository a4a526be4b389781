"""Install what a guest run needs, on demand: QEMU, busybox and udev from apt, virtme-ng into its own venv.

Idempotent and quick when done (one ``dpkg-query`` plus a few stats). udev is needed in the guest or the
command's output is lost (rc 255); busybox builds vng's initramfs; vng calls ``virtme-run`` by name, so the venv's
``bin/`` goes on PATH for the call (see ``vng_env``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from testbed.vm.errors import GuestToolsMissing

APT_PACKAGES = ("qemu-system-x86", "busybox-static", "udev")
VNG_VERSION = "1.42"  # the version the guest commands were tested with
VNG_VENV = Path("/opt/testbed-vng")
VENV_ENV = "TESTBED_VNG_VENV"  # moves the guest tools' venv; read by the entries, as the kernel cache's
QEMU = "qemu-system-x86_64"


def vng_venv(env: Mapping[str, str]) -> Path:
    """The guest tools' venv the entry's environment ``env`` names (``TESTBED_VNG_VENV``), else ``VNG_VENV``."""
    return Path(env.get(VENV_ENV, str(VNG_VENV)))


@dataclass(frozen=True)
class GuestTools:
    vng: Path
    qemu: Path
    venv_bin: Path


def _missing_apt(packages: tuple[str, ...]) -> list[str]:
    res = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *packages],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = {ln.split()[0] for ln in res.stdout.splitlines() if ln.endswith(" installed")}
    return [p for p in packages if p not in installed]


def _apt_install(packages: list[str]) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:  # stale or missing package lists on a fresh machine
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, check=False)
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise GuestToolsMissing(f"QEMU/guest tools missing and `apt-get install {' '.join(packages)}` failed: {tail}")


def _pip_install_vng(venv: Path) -> None:
    if not (venv / "bin" / "pip").exists():
        res = subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise GuestToolsMissing(f"cannot create venv {venv} for virtme-ng: {res.stderr.strip()[-200:]}")
    res = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", f"virtme-ng=={VNG_VERSION}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise GuestToolsMissing(f"pip install virtme-ng=={VNG_VERSION} into {venv} failed: {tail}")


def find_guest_tools(venv: Path = VNG_VENV) -> GuestTools | None:
    """The installed tools, or None if anything is missing (no installing)."""
    vng = venv / "bin" / "vng"
    qemu = Path("/usr/bin") / QEMU
    if not (vng.exists() and (venv / "bin" / "virtme-run").exists() and qemu.exists()):
        return None
    if _missing_apt(APT_PACKAGES):
        return None
    return GuestTools(vng=vng, qemu=qemu, venv_bin=venv / "bin")


def ensure_guest_tools(venv: Path = VNG_VENV, install: bool = True) -> GuestTools:
    """The guest tools, installing what is missing (apt + pip) unless ``install`` is False."""
    found = find_guest_tools(venv)
    if found is not None:
        return found
    missing = _missing_apt(APT_PACKAGES)
    if not install:
        what = ", ".join(missing) if missing else f"virtme-ng in {venv}"
        raise GuestToolsMissing(f"QEMU/guest tools missing ({what}); run `python3 -m testbed vm --setup`")
    if missing:
        print(f"testbed vm: installing {' '.join(missing)} (apt)", file=sys.stderr)
        _apt_install(missing)
    if not (venv / "bin" / "vng").exists():
        print(f"testbed vm: installing virtme-ng {VNG_VERSION} into {venv}", file=sys.stderr)
        _pip_install_vng(venv)
    found = find_guest_tools(venv)
    if found is None:
        raise GuestToolsMissing(f"guest tools still incomplete after installing (need {QEMU}, {venv}/bin/vng)")
    return found


def vng_env(tools: GuestTools) -> dict[str, str]:
    """The environment for the vng call: its venv first on PATH, no pyenv shims (vng re-runs python by name)."""
    path = [str(tools.venv_bin), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYENV")}
    env["PATH"] = ":".join(path)
    return env
