"""The Mininet CLI on a built fabric, with the testbed's own commands: ``python3 -m testbed cli SCENARIO``.

Mininet's commands (nodes, net, links, dump, pingall, pingpair, iperf, sh, ``NODE CMD``) work on the routed fabric
once its objects know the fabric's addresses (testbed.fabric.mininet_view). Added at the prompt, each with help:
``queues``, ``path``, ``tc``, ``run``, ``report`` and ``lab`` (the sheet of the teaching lab that runs this
scenario: the student's part, the instructor's notes only when asked). A failing command prints its error and the
prompt stays; exit, Ctrl-D, SIGTERM and SIGHUP (a closed terminal) all tear the fabric down.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from testbed.fabric.build import Fabric
from testbed.fabric.mininet_view import sync
from testbed.fabric.portplan import FabricPlan
from testbed.host.machine import Machine
from testbed.host.mininet_compat import import_mininet
from testbed.run import job_ccs, run_on_built
from testbed.spec.scenario import Scenario
from traffic.iperf import listening

import_mininet()
from mininet.cli import CLI  # noqa: E402  (Mininet needs the distutils shim above on Python 3.12)
from mininet.log import output, setLogLevel  # noqa: E402


def port_counters(fab: Fabric) -> list[dict[str, Any]]:
    """Every port's root qdisc now: backlog bytes and packets, drops, and marks (RED's counter, or the eBPF
    marker's), from ``tc -s -j`` in each node's namespace."""
    bpf = fab.read_marks() or {}
    rows = []
    by_node: dict[str, set[str]] = {}
    for p in fab.ports():
        by_node.setdefault(p.node, set()).add(p.dev)
    for node, devs in sorted(by_node.items()):
        ns = fab.netns(node)
        out = subprocess.run(["tc", "-n", ns, "-s", "-j", "qdisc", "show"], capture_output=True, text=True, check=True)
        qdiscs = [q for q in json.loads(out.stdout or "[]") if q.get("dev") in devs]
        for dev in sorted(devs):
            mine = [q for q in qdiscs if q["dev"] == dev]
            root = next((q for q in mine if q.get("root")), None)
            if root is None:
                continue
            marks = sum(int(q.get("marked", 0)) for q in mine)
            marks += int((bpf.get((ns, dev)) or {}).get("marks", 0))
            rows.append(
                {"port": f"{node}:{dev}", "backlog": int(root.get("backlog", 0)), "qlen": int(root.get("qlen", 0)),
                 "drops": int(root.get("drops", 0)), "marks": marks, "sent": int(root.get("bytes", 0))}
            )  # fmt: skip
    return sorted(rows, key=lambda r: (-r["backlog"], -r["drops"], -r["marks"], r["port"]))


IPERF_SECONDS = 5
IPERF_PORT = 5299  # apart from the jobs' iperf3 ports (5201 and up)


def iperf3_rates(fab: Fabric, client: str, server: str, seconds: float) -> tuple[float, float]:
    """(server's received, client's sent) bits per second of one iperf3 TCP test from ``client`` to ``server``
    (hosts), run in their namespaces (the server in the fabric's process group) and waited for."""
    srv = fab.procs.spawn("cli-iperf3-s", ["iperf3", "-s", "-1", "-p", str(IPERF_PORT)], netns=fab.netns(server))
    try:
        deadline = time.monotonic() + 10
        while not listening(srv.pid, IPERF_PORT):
            if srv.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"iperf3 -s in {server} did not listen on port {IPERF_PORT}")
            time.sleep(0.02)
        cmd = ["iperf3", "-c", fab.hosts[server].ip, "-p", str(IPERF_PORT), "-t", f"{seconds:g}", "-J"]
        cp = subprocess.run(["ip", "netns", "exec", fab.netns(client), *cmd], capture_output=True, text=True)
    finally:
        srv.stop(grace=1.0)
    if cp.returncode != 0:
        raise RuntimeError(f"iperf3 -c failed ({cp.returncode}): {(cp.stdout + cp.stderr).strip()[-300:]}")
    end = json.loads(cp.stdout)["end"]
    return float(end["sum_received"]["bits_per_second"]), float(end["sum_sent"]["bits_per_second"])


def find_port(fab: Fabric, name: str) -> tuple[str, str]:
    """(node, dev) of ``node:dev`` or of a device name; ValueError names what exists."""
    node, _, dev = name.rpartition(":")
    for p in fab.ports():
        if p.dev == dev and (not node or p.node == node):
            return p.node, p.dev
    raise ValueError(f"no port {name!r}: ports are NODE:DEV, e.g. {fab.ports()[0].node}:{fab.ports()[0].dev}")


class FabricCLI(CLI):  # type: ignore[misc]  # Mininet is untyped
    """Mininet's CLI over ``fab`` (built from ``scenario``); ``run JOB`` records into ``out``."""

    prompt = "mininet> "

    def __init__(self, fab: Fabric, scenario: Scenario, out: Path, machine: Machine, **kw: Any):
        self.fab, self.scenario, self.out, self.machine = fab, scenario, out, machine
        self.jobs: dict[str, threading.Thread] = {}
        self.records: list[Path] = []
        super().__init__(fab.mininet, **kw)  # Mininet's CLI runs its loop in __init__

    def onecmd(self, line: str) -> bool:
        """One command; an error is printed and the prompt stays (Mininet's loop ends on any exception)."""
        try:
            return bool(super().onecmd(line))
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # any failure of one command must leave the prompt alive
            output(f"*** error ({type(exc).__name__}): {exc}\n")
            return False

    def do_iperf(self, line: str) -> None:
        """iperf [CLIENT SERVER]: a 5 s TCP test between two hosts (default the first and the last), with iperf3:
        Mininet's own waits forever for iperf 2.1's server report. Prints the server's and the client's rate."""
        args = line.split()
        if len(args) not in (0, 2):
            raise ValueError("usage: iperf [CLIENT SERVER]")
        client, server = (self.mn[a] for a in args) if args else (self.mn.hosts[0], self.mn.hosts[-1])
        output(f"*** Iperf: testing TCP bandwidth between {client.name} and {server.name}\n")
        rates = iperf3_rates(self.fab, client.name, server.name, IPERF_SECONDS)
        output(f"*** Results: {[f'{r / 1e6:.1f} Mbits/sec' for r in rates]}\n")

    def do_queues(self, line: str) -> None:
        """queues [N]: the N busiest ports now (default 10): backlog, packets, drops and ECN marks so far."""
        n = int(line.strip() or 10)
        rows = port_counters(self.fab)
        output(f"{'port':24s} {'backlog B':>10s} {'pkts':>6s} {'drops':>8s} {'marks':>8s} {'sent B':>12s}\n")
        for r in rows[:n]:
            output(
                f"{r['port']:24s} {r['backlog']:10d} {r['qlen']:6d} {r['drops']:8d} {r['marks']:8d} {r['sent']:12d}\n"
            )

    def do_path(self, line: str) -> None:
        """path SRC DST [SPORT DPORT]: the nodes a TCP flow from host SRC to host DST crosses, as the routers' own
        ECMP hash chooses them, and the spine it takes."""
        args = line.split()
        if len(args) not in (2, 4):
            raise ValueError("usage: path SRC DST [SPORT DPORT]")
        sport, dport = (int(args[2]), int(args[3])) if len(args) == 4 else (0, 0)
        hops = self.fab.predict_path(args[0], args[1], "tcp", sport, dport)
        layers = {n.name: n.layer for n in self.fab.topo.nodes.values()}
        spines = [h for h in hops if layers.get(h) in ("spine", "core")]
        output(" -> ".join(hops) + (f"  (spine {', '.join(spines)})" if spines else "  (no spine: same leaf)") + "\n")

    def do_tc(self, line: str) -> None:
        """tc PORT: the port's qdiscs and classes with their counters (PORT is NODE:DEV or a device name)."""
        node, dev = find_port(self.fab, line.strip())
        ns = self.fab.netns(node)
        for what in ("qdisc", "class"):
            out = subprocess.run(["tc", "-n", ns, "-s", what, "show", "dev", dev], capture_output=True, text=True)
            output(out.stdout + out.stderr)

    def do_run(self, line: str) -> None:
        """run JOB: start the scenario's job JOB in the background, recorded as a run records a point (with its
        telemetry) under the session's directory; `report` compares what ran."""
        name = line.strip()
        jobs = {getattr(j, "name", ""): j for j in self.scenario.workload}
        if name not in jobs:
            raise ValueError(f"no job {name!r} in {self.scenario.name}: jobs are {', '.join(sorted(jobs)) or 'none'}")
        if any(t.is_alive() for t in self.jobs.values()):
            raise RuntimeError("a job is still running (one at a time: they would share the fabric's CPU)")
        point = dataclasses.replace(self.scenario, name=f"{self.scenario.name}-{name}", workload=(jobs[name],))

        def body() -> None:
            res = run_on_built(self.fab, point, self.out, self.machine)
            self.records.append(res.path)
            output(
                f"\n*** job {name}: {res.status}{'' if res.faithful is not False else ' (not faithful)'}: {res.path}\n"
            )

        self.jobs[name] = threading.Thread(target=body, name=f"job-{name}", daemon=True)
        self.jobs[name].start()
        output(f"*** job {name} started; its record goes under {self.out}\n")

    def do_report(self, line: str) -> None:
        """report: write the comparison report of the jobs run in this session so far (OUT/report/report.html),
        and print its path."""
        from results.cli import report_main

        if not self.records:
            raise RuntimeError("no job has finished in this session (`run JOB` first)")
        report_main([*(str(r) for r in self.records), "-o", str(self.out / "report")])

    def do_lab(self, line: str) -> None:
        """lab [--instructor]: the student's sheet of the teaching lab that runs this scenario (docs/labs/);
        --instructor adds the instructor's notes (the fix and the numbers to expect)."""
        from testbed.labsheets import for_scenario, sheet_text

        if line.strip() not in ("", "--instructor"):
            raise ValueError("usage: lab [--instructor]")
        path = for_scenario(self.scenario.name)
        if path is None:
            raise ValueError(f"no lab in docs/labs/ runs the scenario {self.scenario.name!r}")
        output(sheet_text(path, instructor=line.strip() == "--instructor"))


def _on_hangup(signum: int, frame: FrameType | None) -> None:
    """Leave the CLI; the fabric's context manager tears it down, and no later signal may cut that short (a closing
    terminal, or pexpect, follows SIGHUP with SIGCONT and SIGINT)."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def open_cli(scenario: Scenario, out: Path, machine: Machine, plan: FabricPlan | None = None, **kw: Any) -> None:
    """Build the scenario's fabric (as ``plan`` says, when given), open the CLI on it, tear it down when the CLI
    ends (exit, EOF, signals)."""
    extra_cc = job_ccs(scenario.workload)
    old = signal.signal(signal.SIGHUP, _on_hangup)  # SIGTERM: the fabric's own handler (testbed.fabric.build)
    try:
        with Fabric(scenario.fabric, machine.caps, extra_cc=extra_cc, plan=plan) as fab:
            sync(fab.mininet, fab.topo, fab.netns)
            setLogLevel("output")  # Mininet prints node output, ping and iperf results at this level
            print(f"fabric {fab.prefix}: {len(fab.hosts)} hosts; namespaces are {fab.prefix}-<node>; `help`, `exit`")
            for name, h in fab.hosts.items():
                print(f"  {name:10s} {h.ip:14s} leaf {h.leaf}")
            FabricCLI(fab, scenario, out, machine, **kw)
    finally:
        signal.signal(signal.SIGHUP, old)
