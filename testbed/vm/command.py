"""Build the vng command line and the shell line the guest runs (pure functions, tested without root)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

# tsc=reliable/clocksource=tsc avoid clocksource watchdog stalls under TCG; mitigations=off saves boot and syscall
# time. quiet keeps kernel noise out of the command's output.
DEFAULT_APPEND = ("tsc=reliable", "clocksource=tsc", "mitigations=off")
READY = "__testbed_guest_ready__"  # printed by the guest just before the command starts (stripped from output)
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # no pyenv shims in the guest
HOSTNAME = "testbed-guest"


@dataclass(frozen=True)
class VngOptions:
    image: Path  # boot/vmlinux-VER or boot/vmlinuz-VER (vng finds lib/modules beside boot/)
    accel: str  # "kvm" or "tcg"
    memory: str = "2G"
    cpus: int | None = None  # None: vng's default (all host cores)
    cwd: Path = Path("/")
    rwdirs: tuple[Path, ...] = ()
    rodirs: tuple[tuple[Path, Path], ...] = ()  # (guest path, host path)
    append: tuple[str, ...] = DEFAULT_APPEND
    env: dict[str, str] = field(default_factory=dict)


def guest_script(argv: list[str], env: dict[str, str]) -> str:
    """The shell line run inside: clean PATH, the testbed's guest env, the ready marker, then exec the command."""
    if not argv:
        raise ValueError("no command to run in the guest")
    exports = {"PATH": GUEST_PATH, "PYTHONDONTWRITEBYTECODE": "1", **env}
    export = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items())
    ready = f"echo {READY} $(cut -d' ' -f1 /proc/uptime)"
    return f"{export}; {ready}; exec {shlex.join(argv)}"


def build_vng_command(vng: Path, opts: VngOptions, argv: list[str]) -> list[str]:
    """The full vng argv. --force-9p: virtiofsd is not packaged in Debian 12, 9p is what works here."""
    if opts.accel not in ("kvm", "tcg"):
        raise ValueError(f"accel must be kvm or tcg, not {opts.accel!r}")
    cmd = [
        str(vng),
        "--run",
        str(opts.image),
        "--force-9p",
        "--memory",
        opts.memory,
        "--name",
        HOSTNAME,
        "--cwd",
        str(opts.cwd),
    ]
    if opts.accel == "tcg":
        cmd.append("--disable-kvm")
    if opts.cpus is not None:
        cmd += ["--cpus", str(opts.cpus)]
    for d in opts.rwdirs:
        cmd.append(f"--rwdir={d}")
    for guest, host in opts.rodirs:
        cmd.append(f"--rodir={guest}={host}")
    if opts.append:
        cmd += ["--append", " ".join(opts.append)]
    cmd += ["--exec", guest_script(argv, opts.env)]
    return cmd


def parse_ready(line: str) -> float | None:
    """Guest uptime (s) from the ready marker line, or None if ``line`` is not the marker."""
    parts = line.strip().split()
    if len(parts) == 2 and parts[0] == READY:
        try:
            return float(parts[1])
        except ValueError:
            return None
    return None
