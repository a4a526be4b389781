"""Command line: doctor, clean, cli, run, demo, validate, scheduler, worker, report, bench, vm, calibrate."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from testbed import entry
from testbed.errors import TestbedError
from testbed.spec.fields import SpecError

if TYPE_CHECKING:
    from testbed.run import RunOptions

DEFAULT_SCENARIO = str(Path(__file__).resolve().parents[1] / "scenarios" / "default.yaml")


def _doctor(args: argparse.Namespace) -> int:
    from testbed.machine import doctor_rows, probe

    caps = probe()
    if args.json:
        print(json.dumps(caps.to_dict(), indent=2, sort_keys=True))
        return 0
    rows = doctor_rows(caps)
    widths = [
        max(len(r[i]) for r in rows + [("capability", "status", "without it", "how to get it")]) for i in range(4)
    ]
    print(
        f"kernel {caps.kernel} on {caps.machine}, {caps.cpus} CPUs"
        + ("" if caps.root else " (not root: namespace trials skipped)")
    )
    for row in [("capability", "status", "without it", "how to get it"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def _clean(args: argparse.Namespace) -> int:
    from testbed.host.ownership import clean

    done = clean(quiet=False)
    if not done:
        print("nothing to clean")
    return 0


def _mn_cli(args: argparse.Namespace) -> int:
    from testbed.labcli import open_cli
    from testbed.machine import here
    from testbed.plan.point import plan_point
    from testbed.spec.scenario import load_scenario
    from testbed.spec.settings import parse_settings

    scenario = load_scenario(args.scenario, parse_settings(args.set))
    plan = plan_point(scenario, here(os.environ))  # one line and exit 2 before anything is built
    open_cli(scenario, Path(args.out), plan.machine, plan=plan.fabric)
    return 0


def run_options(args: argparse.Namespace) -> RunOptions:
    """The RunOptions of a parsed `run` / `demo` command line (pure: builds nothing)."""
    from testbed.run import RunOptions

    return RunOptions(
        scenario=Path(args.scenario),
        out=Path(args.out),
        report=not args.no_report,
        kernel=args.kernel,
        allow_unfaithful=args.allow_unfaithful,
        retake_unfaithful=args.retake_unfaithful,
        lock_wait=args.wait,
        cluster=args.cluster or os.environ.get("TESTBED_CLUSTER") or None,
        tls=(args.tls_ca_file, args.tls_cert, args.tls_key),
        settings=tuple(args.set),
    )


def _run(args: argparse.Namespace) -> int:
    from testbed.run import run_main

    opts = run_options(args)
    if opts.cluster:
        from testbed.cluster.client import run_on_cluster

        return run_main(opts, run_on_cluster, env=os.environ)
    return run_main(opts, env=os.environ)  # the command's environment, read here once


def _report(args: argparse.Namespace) -> int:
    from results.cli import report_main

    return report_main(args.rest)


def _vm(args: argparse.Namespace) -> int:
    from testbed.vm import vm_main

    return vm_main(args.rest)


def _bench(args: argparse.Namespace) -> int:
    from bench.main import bench_main

    return bench_main(args.rest)


def _calibrate(args: argparse.Namespace) -> int:
    from testbed.calibrate.cli import main as calibrate_main

    return calibrate_main(args.rest)


def _validate(args: argparse.Namespace) -> int:
    from testbed.validate import validate_main

    return validate_main(args.scenario, args.set)


def _set_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one scenario key for this command (a dotted key path, as sweep axes name them; VALUE is YAML), "
        "e.g. --set fabric.host_link.rate=50Mbit; repeatable",
    )


def _lab(args: argparse.Namespace) -> int:
    from testbed.labsheets import main as lab_main

    return lab_main(args.rest)


def _tls_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-ca-file", default=None, help="cluster TLS: the CA (else Dask's configuration)")
    p.add_argument("--tls-cert", default=None, help="cluster TLS: this side's certificate")
    p.add_argument("--tls-key", default=None, help="cluster TLS: its key")


def _scheduler(args: argparse.Namespace) -> int:
    from testbed.cluster.serve import scheduler_main, security

    return scheduler_main(args.host, args.port, security(args.tls_ca_file, args.tls_cert, args.tls_key))


def _worker(args: argparse.Namespace) -> int:
    from testbed.cluster.serve import security, worker_main

    return worker_main(args.address, security(args.tls_ca_file, args.tls_cert, args.tls_key))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed", description="AI-cluster fabric emulation testbed")
    p.add_argument("--version", action="store_true", help="print the version and the git revision, then exit")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="what this machine can do, and what is missing")
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=_doctor)
    c = sub.add_parser("clean", help="remove what crashed runs left (only objects carrying this project's prefix)")
    c.set_defaults(fn=_clean)
    m = sub.add_parser("cli", help="build a scenario's fabric and open the Mininet CLI on it")
    m.add_argument("scenario")
    m.add_argument("-o", "--out", default="runs/cli", help="where `run JOB` at the prompt records (default runs/cli)")
    _set_option(m)
    m.set_defaults(fn=_mn_cli)
    for name, helptext in (
        ("run", "run a scenario (every sweep point) and report"),
        ("demo", "run the default experiment"),
    ):
        r = sub.add_parser(name, help=helptext)
        if name == "run":
            r.add_argument("scenario")
        else:
            r.set_defaults(scenario=DEFAULT_SCENARIO)
        r.add_argument("-o", "--out", default="runs", help="parent directory of the run records (default ./runs)")
        r.add_argument("--no-report", action="store_true", help="do not write the comparison report")
        _set_option(r)
        r.add_argument("--kernel", default=None, help="run inside a pinned stock kernel, e.g. debian-6.1")
        r.add_argument(
            "--wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="wait this long for another run on this machine to finish (default 0: refuse at once)",
        )
        r.add_argument(
            "--allow-unfaithful", action="store_true", help="exit 0 even if a run fails a fidelity guardrail"
        )
        r.add_argument(
            "--retake-unfaithful",
            type=int,
            default=0,
            metavar="N",
            help="run a point that failed a fidelity guardrail again, up to N times (the first record is kept)",
        )
        r.add_argument(
            "--cluster",
            default=None,
            metavar="ADDRESS",
            help="run the points on a Dask cluster's testbed workers (default: $TESTBED_CLUSTER, else here)",
        )
        _tls_options(r)
        r.set_defaults(fn=_run)
    v = sub.add_parser("validate", help="check a scenario file and print each point's plan, without running it")
    v.add_argument("scenario")
    _set_option(v)
    v.set_defaults(fn=_validate)
    sch = sub.add_parser("scheduler", help="start a Dask scheduler for testbed workers (binds to localhost)")
    sch.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    sch.add_argument("--port", type=int, default=8786)
    _tls_options(sch)
    sch.set_defaults(fn=_scheduler)
    w = sub.add_parser("worker", help="join a cluster as a worker: one point at a time, as root")
    w.add_argument("address", help="the scheduler, e.g. tcp://10.0.0.1:8786")
    _tls_options(w)
    w.set_defaults(fn=_worker)
    for name, fn, helptext in (
        ("report", _report, "compare run records: table, plots, HTML"),
        ("vm", _vm, "run a command inside a pinned stock kernel (QEMU)"),
        ("bench", _bench, "benchmarks: emulation capacity, build time, sampler, collective fidelity"),
        ("calibrate", _calibrate, "measure this machine's CPU cost per packet (cached; the preflight uses it)"),
        ("lab", _lab, "a teaching lab: list, show its student sheet (--instructor: the notes), check a fix"),
    ):
        s = sub.add_parser(name, help=helptext, add_help=False)
        s.add_argument("rest", nargs=argparse.REMAINDER)
        s.set_defaults(fn=fn)
    return p


PASSTHROUGH = {"report": _report, "vm": _vm, "bench": _bench, "calibrate": _calibrate, "lab": _lab}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--version"]:
        print(entry.version_text())
        return 0
    why = entry.refusal(argv[0], argv[1:]) if argv else None
    if why:  # root, or the emulation modules on this interpreter: one line, before any import fails
        print(why, file=sys.stderr)
        return 2
    from testbed.invocation import enter

    enter(os.environ)  # where runs lock and keep their state: the command's environment, read here once
    if argv and argv[0] in PASSTHROUGH:  # these parse their own options (before or after positionals)
        return _guarded(PASSTHROUGH[argv[0]], argparse.Namespace(rest=argv[1:]))
    args = parser().parse_args(argv)
    return _guarded(args.fn, args)


def _guarded(fn: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return fn(args)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; everything this run created was removed", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        if not entry.is_dependency(exc):
            raise
        print(entry.missing_module_line(str(exc.name)), file=sys.stderr)
        return 1
    except TestbedError as exc:  # the project's own errors: one line (the traceback with TESTBED_DEBUG=1)
        import os

        if os.environ.get("TESTBED_DEBUG"):
            raise
        print(f"error ({type(exc).__name__}): {exc}", file=sys.stderr)
        return 1
    # anything else is a bug: Python prints its traceback (exit 1)
