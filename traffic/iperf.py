"""iperf3 background flows driven through its JSON output (``-J``), parsed into flows.csv / flow_samples.csv.

One server (``iperf3 -s``) in dst's namespace; one client loop in src's namespace running ``cycles`` clients of
``on`` seconds separated by ``off`` seconds (one cycle of ``duration`` seconds for a long-lived flow). Each cycle
writes ``<job>.c<i>.json`` (iperf3's JSON) and ``<job>.c<i>.t0`` (the shared clock just before the client ran),
so ``parse`` turns iperf3's relative times into epoch seconds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.spec.placement import iperf_cycles
from testbed.spec.workload import IperfJob
from traffic.base import GeneratorError, ProcGenerator, Rows, RunContext, check_cc, host, tos_of
from traffic.placement import PlacementError

if TYPE_CHECKING:
    from testbed.host.capabilities import Capabilities

IPERF = "iperf3"
# $5: each cycle's first client port (--cport), space-separated, or empty: the kernel picks
LOOP = (
    'n=$1; on=$2; off=$3; pre=$4; ports=$5; shift 5; i=0; while [ "$i" -lt "$n" ]; do '
    "cport=${ports%% *}; ports=${ports#* }; "
    'date +%s.%N > "$pre.c$i.t0"; iperf3 "$@" ${cport:+--cport $cport} -t "$on" --logfile "$pre.c$i.json" '
    "|| exit $?; "
    'i=$((i+1)); if [ "$i" -lt "$n" ]; then sleep "$off"; fi; done'
)


def listening(pid: int, port: int) -> bool:
    """A TCP socket listens on ``port`` (IPv4 or IPv6: iperf3 binds both) in the namespace of process ``pid``."""
    lines: list[str] = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as fh:
                lines += fh.readlines()[1:]
        except OSError:
            continue
    want = f":{port:04X}"
    return any(f[1].endswith(want) and f[3] == "0A" for f in (line.split() for line in lines) if len(f) > 3)


def server_port(index: int) -> int:
    """The port of the iperf3 server of the job at ``index`` in the workload."""
    return 5201 + index


def bulk_senders(jobs: Sequence[Any]) -> list[tuple[str, int]]:
    """(src host, server port) of every backlogged iperf3 client in the workload: TCP without a rate cap, so its
    socket should never run out of data (what the ``sender_backlog`` guardrail judges)."""
    return [
        (j.src, server_port(i))
        for i, j in enumerate(jobs)
        if isinstance(j, IperfJob) and j.proto == "tcp" and not j.rate_bps
    ]


def fixed_client_ports(jobs: Sequence[Any]) -> dict[str, frozenset[int]]:
    """Host -> the client ports the workload's iperf3 jobs fix (``cport``): kept out of the placed ones."""
    out: dict[str, set[int]] = {}
    for j in jobs:
        if isinstance(j, IperfJob):
            out.setdefault(j.src, set()).update(j.cports())
    return {h: frozenset(p) for h, p in out.items() if p}


class IperfGenerator(ProcGenerator):
    def __init__(self, spec: IperfJob, index: int):
        super().__init__(spec.name, spec.start_after)
        self.spec = spec
        self.port = server_port(index)
        self.timeout = spec.duration + 30
        self.cports: list[int] = []  # each cycle's client port (client_ports), set by start

    def cycles(self) -> tuple[int, float, float]:
        s = self.spec
        if s.on is None or s.off is None:
            return 1, s.duration, 0.0
        return iperf_cycles(s), s.on, s.off

    def client_ports(self, ctx: RunContext, src: str) -> list[int]:
        """Each cycle's client port (``--cport``; stream i of ``parallel`` binds it + i): the job's fixed ``cport``,
        or a block of placed ports per cycle (flow keys ``c<cycle>.s<stream>``), new for every cycle so that no
        client binds a port the last one may still hold; empty when the kernel picks."""
        s = self.spec
        n = self.cycles()[0]
        keys = [[f"c{c}.s{i}" for i in range(s.parallel)] for c in range(n)]
        try:
            if s.cport is not None:  # the scenario's own port (no on/off cycling: one cycle)
                for i, key in enumerate(keys[0]):
                    ctx.ports.claim(src, self.name, key, s.cport + i)
                return [s.cport]
            if not ctx.ports.placed:
                return []
            return [ctx.ports.block(src, self.name, cycle)[0] for cycle in keys]
        except PlacementError as exc:
            raise GeneratorError(str(exc)) from None

    def check(self, caps: Capabilities) -> None:
        check_cc(caps, self.spec.cc, self.name)
        if caps.tools.get("iperf3") is False:
            raise GeneratorError(f"job {self.name}: iperf3 is not installed (apt install iperf3)")

    def client_argv(self, dst_ip: str, cc: str | None = None, src_ip: str | None = None) -> list[str]:
        """iperf3's client options but ``-t`` and ``--cport`` (per cycle, LOOP); ``src_ip``: bind the client's
        address (``-B``), as a placed port is bound with its host's address."""
        s = self.spec
        argv = [IPERF, "-c", dst_ip, "-p", str(self.port), "-J", "-i", f"{s.interval:g}", "-P", str(s.parallel)]
        argv += ["--connect-timeout", "3000"]
        if src_ip:
            argv += ["-B", src_ip]
        if s.proto == "udp":
            argv += ["-u", "-b", str(s.rate_bps)]
        elif s.rate_bps:
            argv += ["-b", str(s.rate_bps)]
        if cc and s.proto == "tcp":
            argv += ["-C", cc]
        tos = tos_of(s.dscp)
        if tos:  # the server's ACKs carry it too: hosts set tcp_reflect_tos
            argv += ["-S", str(tos)]
        return argv

    def start(self, ctx: RunContext) -> None:
        src, dst = host(ctx, self.spec.src, self.name), host(ctx, self.spec.dst, self.name)
        self._spawn(ctx, "server", [IPERF, "-s", "-p", str(self.port)], dst.netns, server=True)
        n = self.cycles()[0]
        self.cports = self.client_ports(ctx, src.name)
        meta = {"job": self.name, "src": src.name, "dst": dst.name, "proto": self.spec.proto, "cycles": n}
        meta["cports"] = self.cports
        (ctx.raw_dir / f"{self.name}.iperf.json").write_text(json.dumps(meta))
        if ctx.go_file is None:
            self.go(ctx, listen_wait=0.2)
        # else the client starts at the go time (go()): the server listens by then

    def ready(self) -> bool:
        """The server listens (its namespace's /proc/PID/net/tcp has the port in LISTEN)."""
        return super().ready() and all(listening(p.pid, self.port) for p in self.servers)

    def loop_argv(self, ctx: RunContext, listen_wait: float = 0.0) -> list[str]:
        """The client loop's command line: LOOP over the cycles, each with its client port (``self.cports``)."""
        src, dst = host(ctx, self.spec.src, self.name), host(ctx, self.spec.dst, self.name)
        n, on, off = self.cycles()
        return [
            "sh",
            "-c",
            (f"sleep {listen_wait:g}; " if listen_wait else "") + LOOP,
            "sh",
            str(n),
            f"{on:g}",
            f"{off:g}",
            str(ctx.raw_dir / self.name),
            " ".join(str(p) for p in self.cports),
            *self.client_argv(dst.ip, ctx.kernel_cc(self.spec.cc), src.ip if self.cports else None),
        ]

    def go(self, ctx: RunContext, listen_wait: float = 0.0) -> None:
        """Start the client (``listen_wait``: a head start for a server spawned just now)."""
        self._spawn(ctx, "client", self.loop_argv(ctx, listen_wait), host(ctx, self.spec.src, self.name).netns)

    def parse(self, raw_dir: Path) -> Rows:
        return parse_iperf(raw_dir, self.name)


def parse_iperf(raw_dir: Path, job: str) -> Rows:
    """Pure: flows and flow_samples rows from ``<job>.iperf.json`` and the per-cycle iperf3 JSON files."""
    meta = json.loads((raw_dir / f"{job}.iperf.json").read_text())
    flows: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    for c in range(meta["cycles"]):
        path = raw_dir / f"{job}.c{c}.json"
        if not path.exists():
            raise GeneratorError(f"job {job}: cycle {c} left no iperf3 output ({path.name})")
        data = json.loads(path.read_text())
        if "error" in data:
            raise GeneratorError(f"job {job}: iperf3 cycle {c}: {data['error']}")
        t0 = float((raw_dir / f"{job}.c{c}.t0").read_text().strip())
        rows, smp = iperf_rows(data, job, c, t0, meta)
        flows += rows
        samples += smp
    return {"flows": flows, "flow_samples": samples}


def iperf_rows(
    data: dict[str, Any], job: str, cycle: int, t0: float, meta: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One flows row per stream (goodput from the receiver's byte count) and one sample per stream interval."""
    udp = meta["proto"] == "udp"
    conns = {c["socket"]: c for c in data["start"]["connected"]}
    flows, samples = [], []
    for st in data["end"]["streams"]:
        side = st["udp"] if udp else st["receiver"]
        sock = side["socket"]
        conn = conns[sock]
        fid = f"{job}.c{cycle}.s{sock}"
        got = side["bytes"] * (1 - side.get("lost_percent", 0) / 100) if udp else side["bytes"]
        seconds = side["seconds"] or 1e-9
        flows.append(
            {
                "job": job,
                "flow_id": fid,
                "src": meta["src"],
                "dst": meta["dst"],
                "proto": meta["proto"],
                "sport": conn["local_port"],
                "dport": conn["remote_port"],
                "bytes": int(got),
                "t_start": t0 + side["start"],
                "t_end": t0 + side["end"],
                "goodput_bps": got * 8 / seconds,
                "retrans": None if udp else st["sender"].get("retransmits", 0),
                "path": "",
            }
        )
    for iv in data["intervals"]:
        for st in iv["streams"]:
            samples.append(
                {
                    "job": job,
                    "flow_id": f"{job}.c{cycle}.s{st['socket']}",
                    "t": t0 + st["end"],
                    "bytes": st["bytes"],
                    "cwnd": st.get("snd_cwnd"),
                    "rtt_us": st.get("rtt"),
                    "retrans": st.get("retransmits"),
                }
            )
    return flows, samples
