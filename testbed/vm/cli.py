"""``python3 -m testbed vm [options] -- COMMAND...``: run COMMAND in the guest kernel, return its exit code."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from testbed.host.ownership import use_state_dir
from testbed.vm.errors import VmError
from testbed.vm.guest import run_in_guest
from testbed.vm.kernel import ALIASES, ensure_kernel, kernel_cache
from testbed.vm.tools import ensure_guest_tools, vng_venv

OUTPUT_FLAGS = ("-o", "--output", "--out", "--outdir", "--output-dir")
CHECK_COMMAND = ["/usr/bin/python3", "-m", "testbed.vm.check"]


def output_dirs(command: list[str]) -> list[Path]:
    """Directories named after -o/--output/... in COMMAND (``-o DIR`` or ``--output=DIR``): shared read-write."""
    found: list[Path] = []
    for i, arg in enumerate(command):
        if arg in OUTPUT_FLAGS and i + 1 < len(command):
            found.append(Path(command[i + 1]))
        elif "=" in arg and arg.split("=", 1)[0] in OUTPUT_FLAGS:
            found.append(Path(arg.split("=", 1)[1]))
    return found


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m testbed vm", description="Run COMMAND inside a pinned stock kernel (virtme-ng + QEMU)."
    )
    p.add_argument(
        "--kernel",
        default="debian-6.1",
        help=f"kernel alias ({', '.join(ALIASES)}) or exact version like 6.1.0-57-amd64",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for the whole guest run (boot included)")
    p.add_argument("--memory", default="2G")
    p.add_argument("--cpus", type=int, default=None, help="guest CPUs (default: all host cores)")
    p.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    p.add_argument(
        "--rwdir",
        action="append",
        default=[],
        type=Path,
        help="extra host directory the guest may write (runs/ and -o DIRs are always shared)",
    )
    p.add_argument("--bench-lock", action="store_true", help="hold /run/testbed-bench.lock while the guest runs")
    p.add_argument(
        "--lock-wait",
        type=float,
        default=1800.0,
        help="seconds to wait for a native run to release the host's run lock (the guest holds it while it runs)",
    )
    p.add_argument("--no-install", action="store_true", help="fail instead of installing missing tools")
    p.add_argument("--quiet", action="store_true", help="do not print the one-line summary")
    p.add_argument("--setup", action="store_true", help="install the guest tools and fetch the kernel, then exit")
    p.add_argument("--check", action="store_true", help="run the guest capability check (red+ecn, netem, ...)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    return p


def vm_main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    env = os.environ  # `testbed vm`'s own environment, read here once
    use_state_dir(env)  # the host's run lock, held while the guest runs
    cache, venv = kernel_cache(env), vng_venv(env)
    try:
        if args.setup:
            tools = ensure_guest_tools(venv, install=not args.no_install)
            k = ensure_kernel(args.kernel, cache)
            print(
                f"testbed vm: ready: {tools.vng}, {tools.qemu}, kernel {k.version} ({k.package} "
                f"{k.package_version}) at {k.image}"
            )
            return 0
        if args.check:
            command = CHECK_COMMAND + command
        if not command:
            print("testbed vm: error: no COMMAND given (use: python3 -m testbed vm -- COMMAND...)", file=sys.stderr)
            return 2
        res = run_in_guest(
            command,
            kernel=args.kernel,
            rwdirs=[*args.rwdir, *output_dirs(command)],
            timeout=args.timeout,
            memory=args.memory,
            cpus=args.cpus,
            accel=args.accel,
            install=not args.no_install,
            bench_lock=args.bench_lock,
            lock_wait=args.lock_wait,
            host_env=env,
            cache=cache,
            venv=venv,
        )
    except VmError as e:
        print(f"testbed vm: error: {e}", file=sys.stderr)
        return e.exit_code
    if not args.quiet:
        print(
            f"testbed vm: kernel {res.kernel_version} ({res.kernel_package}), {res.accel} ({res.accel_reason}), "
            f"boot {res.boot_s:.1f} s, total {res.wall_s:.1f} s, rc {res.rc}",
            file=sys.stderr,
        )
    return res.rc


if __name__ == "__main__":
    sys.exit(vm_main(sys.argv[1:]))
