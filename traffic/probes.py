"""Generators of the latency probe (rtt.csv) and of short flows / incast (fct.csv), over traffic.flowtools."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.spec.units import format_bytes
from testbed.spec.workload import RttProbeJob, ShortFlowsJob
from traffic.base import PYTHON, GeneratorError, ProcGenerator, Rows, RunContext, check_cc, host, read_jsonl, tos_of
from traffic.placement import PlacementError
from traffic.rtt_probe import DRAIN_MAX_S

if TYPE_CHECKING:
    from testbed.host.capabilities import Capabilities

TOOL = [PYTHON, "-m", "traffic.flowtools"]


class RttProbeGenerator(ProcGenerator):
    """One echo server per distinct destination, one prober per [src, dst] pair (traffic.rtt_probe), each on the
    source port the run's placement gives it (flow key ``probe<i>``, i the pair's index)."""

    def __init__(self, spec: RttProbeJob, index: int):
        super().__init__(spec.name, spec.start_after)
        self.spec = spec
        self.port = 7000 + 10 * index
        # the slots, a catch-up after a stall as long again, and the wait for the last answers
        self.timeout = 2 * spec.duration + DRAIN_MAX_S + 10

    def check(self, caps: Capabilities) -> None:
        check_cc(caps, self.spec.cc, self.name)

    def start(self, ctx: RunContext) -> None:
        s = self.spec
        probes = []
        for i, (src, dst) in enumerate(s.pairs):
            try:  # the prober's connection (or datagrams) from its placed port: the same one in every variant
                sport = ctx.ports.sport(host(ctx, src, self.name).name, s.name, f"probe{i}")
            except PlacementError as exc:
                raise GeneratorError(str(exc)) from None
            probes.append(
                {
                    "src": src,
                    "dst": dst,
                    "src_ip": host(ctx, src, self.name).ip,
                    "sport": sport,
                    "dst_ip": host(ctx, dst, self.name).ip,
                    "port": self.port,
                    "size": s.size,
                    "interval": s.interval,
                    "duration": s.duration,
                    "slots": s.slots,
                    "proto": s.proto,
                    "cc": ctx.kernel_cc(s.cc),
                    "tos": tos_of(s.dscp),
                }
            )
        cfg = {
            "job": s.name,
            "port": self.port,
            "size": s.size,
            "proto": s.proto,
            "cc": ctx.kernel_cc(s.cc),
            "tos": tos_of(s.dscp),
            "probes": probes,
            "out": str(ctx.raw_dir / f"{s.name}.probe{{index}}.jsonl"),
        }
        path = ctx.raw_dir / f"{s.name}.config.json"
        path.write_text(json.dumps(cfg, indent=1))
        for dst in sorted({d for _, d in s.pairs}):
            self._spawn(
                ctx, f"echo-{dst}", [*TOOL, str(path), "echo", ctx.hosts[dst].ip], ctx.hosts[dst].netns, server=True
            )
        for i, (src, _) in enumerate(s.pairs):  # a probe connects with retries until its echo server listens
            self._spawn(ctx, f"probe{i}", [*TOOL, str(path), "probe", str(i)], ctx.hosts[src].netns, gated=True)

    def parse(self, raw_dir: Path) -> Rows:
        return parse_rtt(raw_dir, self.name)


def probe_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pure: one row per slot a prober sent, in seq order: ``t_send``; ``rtt_s``, its first answer's arrival minus
    its send, less the time the echo held it (None, an empty cell, when no answer came before the prober ended);
    ``send_late_s``, how long after its slot it was sent. Older probers wrote one ``rtt`` record per request: read
    as written."""
    sends: dict[int, dict[str, Any]] = {}
    answers: dict[int, dict[str, Any]] = {}
    rows = []
    for rec in records:
        kind = rec.get("type")
        if kind == "send":
            sends.setdefault(rec["seq"], rec)
        elif kind == "answer":
            answers.setdefault(rec["seq"], rec)
        elif kind == "rtt":
            rows.append({"seq": rec["seq"], "t_send": rec["t_send"], "rtt_s": rec["rtt_s"], "send_late_s": None})
    for seq in sorted(sends):
        t_send, answer = sends[seq]["t_send"], answers.get(seq)
        rtt = None if answer is None else answer["t_recv"] - t_send - answer.get("hold_s", 0.0)
        rows.append({"seq": seq, "t_send": t_send, "rtt_s": rtt, "send_late_s": t_send - sends[seq]["t_sched"]})
    return rows


def parse_rtt(raw_dir: Path, job: str) -> Rows:
    """Pure: rtt.csv's rows, one per slot each prober sent (``probe_rows``)."""
    cfg = json.loads((raw_dir / f"{job}.config.json").read_text())
    rows = []
    for i, p in enumerate(cfg["probes"]):
        path = raw_dir / f"{job}.probe{i}.jsonl"
        if not path.exists():
            raise GeneratorError(f"job {job}: the probe from {p['src']} to {p['dst']} wrote no records")
        rows += [{"job": job, "src": p["src"], "dst": p["dst"], **r} for r in probe_rows(read_jsonl(path))]
    return {"rtt": rows}


def draw_flows(spec: ShortFlowsJob) -> list[list[list[int]]]:
    """Per sender, its flows as [flow id, size, round], sizes drawn from the weighted distribution with the
    job's seed (deterministic). Incast: ``count`` rounds, one flow per sender per round."""
    rng = random.Random(spec.seed)
    sizes = [s for s, _ in spec.sizes]
    weights = [w for _, w in spec.sizes]
    out: list[list[list[int]]] = [[] for _ in spec.senders]
    fid = 0
    for rnd in range(spec.count):
        for i in range(len(spec.senders)):
            out[i].append([fid, rng.choices(sizes, weights)[0], rnd if spec.kind == "incast" else 0])
            fid += 1
    return out


class ShortFlowsGenerator(ProcGenerator):
    def __init__(self, spec: ShortFlowsJob, index: int):
        super().__init__(spec.name, spec.start_after)
        self.spec = spec
        self.port = 9000 + 10 * index
        self.timeout = spec.timeout

    def check(self, caps: Capabilities) -> None:
        check_cc(caps, self.spec.cc, self.name)

    def start(self, ctx: RunContext) -> None:
        s = self.spec
        recv = host(ctx, s.receiver, self.name)
        senders = [host(ctx, h, self.name) for h in s.senders]
        flows = draw_flows(s)
        try:  # every flow its own placed source port (each incast round's too): the same one in every variant
            sports = [
                [ctx.ports.sport(h.name, s.name, f"f{f[0]}") for f in fl] for h, fl in zip(senders, flows, strict=True)
            ]
        except PlacementError as exc:
            raise GeneratorError(str(exc)) from None
        cfg = {
            "job": s.name,
            "mode": s.kind,
            "port": self.port,
            "dst": recv.name,
            "dst_ip": recv.ip,
            "cc": ctx.kernel_cc(s.cc),
            "tos": tos_of(s.dscp),
            "senders": len(senders),
            "sender_names": [h.name for h in senders],
            "src_ips": [h.ip for h in senders],
            "sports": sports,
            "rounds": s.count,
            "concurrency": s.concurrency,
            "timeout": s.timeout,
            "flows": flows,
            "round_of": {str(f[0]): f[2] for fl in flows for f in fl},
            "out": str(ctx.raw_dir / f"{s.name}.src{{index}}.jsonl"),
        }
        path = ctx.raw_dir / f"{s.name}.config.json"
        path.write_text(json.dumps(cfg))
        # incast: the sink releases every round, so it is the one gated (once every sender is connected); short
        # flows: each sender is gated. Senders connect with retries until the sink listens.
        incast = s.kind == "incast"
        self._spawn(ctx, "sink", [*TOOL, str(path), "sink"], recv.netns, server=True, gated=incast)
        for i, h in enumerate(senders):
            self._spawn(ctx, f"src{i}", [*TOOL, str(path), "source", str(i)], h.netns, gated=not incast)

    def parse(self, raw_dir: Path) -> Rows:
        return parse_fct(raw_dir, self.name)


def parse_fct(raw_dir: Path, job: str) -> Rows:
    """Pure: one fct.csv row per completed flow; size_class is the flow's size (e.g. ``100KB``)."""
    cfg = json.loads((raw_dir / f"{job}.config.json").read_text())
    rows = []
    for i, name in enumerate(cfg["sender_names"]):
        path = raw_dir / f"{job}.src{i}.jsonl"
        if not path.exists():
            raise GeneratorError(f"job {job}: sender {name} wrote no records")
        for rec in read_jsonl(path):
            rows.append(
                {
                    "job": job,
                    "flow_id": rec["flow_id"],
                    "src": name,
                    "dst": cfg["dst"],
                    "size_bytes": rec["size"],
                    "t_start": rec["t_start"],
                    "t_end": rec["t_end"],
                    "size_class": format_bytes(rec["size"]),
                    "proto": "tcp",
                    "sport": rec.get("sport"),
                    "dport": cfg["port"],
                }
            )
    rows.sort(key=lambda r: r["flow_id"])
    return {"fct": rows}
