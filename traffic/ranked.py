"""Generators of the rank-based jobs (collectives, parameter server, pipeline): one traffic.worker per rank.

``start`` writes ``<job>.config.json`` into the raw directory (everything ``parse`` needs: ranks with their hosts,
sizes, the link payload rate; and every connection's placed source port, ``sports``) and spawns one worker per rank
in its host's namespace. ``parse`` reads the config
and the ``<job>.rank<r>.jsonl`` files and returns rows of iterations.csv, steps.csv (pipeline: pipeline.csv),
worker_cpu.csv and flows.csv (one row per connection and direction: its ports, for ECMP path attribution; goodput
over the first-to-last send span of the whole job).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.spec.topology import HostInfo
from testbed.spec.workload import CollectiveJob, PipelineJob, PsJob, StepJob
from traffic import formulas
from traffic.base import PYTHON, GeneratorError, ProcGenerator, Rows, RunContext, check_cc, host, read_jsonl, tos_of
from traffic.placement import PlacementError
from traffic.stalls import stall_rows
from traffic.trace_job import trace_config, trace_ops
from traffic.worker import build_schedule

if TYPE_CHECKING:
    from testbed.host.capabilities import Capabilities


def resolve_ranks(ranks: str | tuple[str, ...], hosts: dict[str, HostInfo], job: str) -> list[HostInfo]:
    """``all``: fabric order; ``one_per_leaf``: each leaf's first host; ``leaf_interleaved``: round-robin across
    leaves (every ring neighbour on another leaf); or the listed hosts in that order."""
    if isinstance(ranks, tuple):
        return [hosts[h] if h in hosts else _unknown(h, hosts, job) for h in ranks]
    by_leaf: dict[str, list[HostInfo]] = {}
    for h in hosts.values():
        by_leaf.setdefault(h.leaf, []).append(h)
    if ranks == "all":
        return list(hosts.values())
    if ranks == "one_per_leaf":
        return [g[0] for g in by_leaf.values()]
    groups = list(by_leaf.values())
    return [g[i] for i in range(max(len(g) for g in groups)) for g in groups if i < len(g)]


def _unknown(name: str, hosts: dict[str, HostInfo], job: str) -> HostInfo:
    raise GeneratorError(f"job {job}: host {name!r} is not in the fabric (hosts: {', '.join(sorted(hosts))})")


class RankedGenerator(ProcGenerator):
    """Runs a CollectiveJob, TraceJob, DdpJob, PsJob or PipelineJob; ``index`` (its place in the workload) picks
    its ports."""

    def __init__(self, spec: CollectiveJob | StepJob | PsJob | PipelineJob, index: int):
        super().__init__(spec.name, spec.start_after)
        self.spec = spec
        self.port = 20000 + 10 * index
        self.timeout = spec.timeout

    def check(self, caps: Capabilities) -> None:
        check_cc(caps, self.spec.cc, self.name)
        s = self.spec
        hd = isinstance(s, CollectiveJob) and s.algorithm == "halving_doubling"
        if hd and isinstance(s.ranks, tuple) and len(s.ranks) & (len(s.ranks) - 1):
            raise GeneratorError(f"job {self.name}: halving_doubling needs a power-of-two number of ranks")

    def members(self, ctx: RunContext) -> list[HostInfo]:
        s = self.spec
        if isinstance(s, PsJob):
            return [host(ctx, h, self.name) for h in (*s.workers, *s.servers)]
        if isinstance(s, PipelineJob):
            return [host(ctx, h, self.name) for h in s.stages]
        ranks = resolve_ranks(s.ranks, ctx.hosts, self.name)
        if len(ranks) < 2:
            raise GeneratorError(f"job {self.name}: a collective needs at least 2 ranks, got {len(ranks)}")
        hd = isinstance(s, CollectiveJob) and s.algorithm == "halving_doubling"
        if hd and len(ranks) & (len(ranks) - 1):
            raise GeneratorError(f"job {self.name}: halving_doubling needs a power-of-two number of ranks")
        return ranks

    def config(self, ctx: RunContext) -> dict[str, Any]:
        s = self.spec
        ranks = self.members(ctx)
        cfg: dict[str, Any] = {
            "job": s.name,
            "kind": s.kind,
            "hosts": [{"name": h.name, "ip": h.ip, "leaf": h.leaf} for h in ranks],
            "leaves": [h.leaf for h in ranks],
            "port": self.port,
            "iterations": s.iterations,
            "warmup": s.warmup,
            "compute_gap": s.compute_gap,
            "timeout": s.timeout,
            "cc": ctx.kernel_cc(s.cc),
            "tos": tos_of(s.dscp),
            "payload_Bps": ctx.payload_Bps,
            "out": str(ctx.raw_dir / f"{s.name}.rank{{rank}}.jsonl"),
        }
        if isinstance(s, CollectiveJob):
            cfg.update(algorithm=s.algorithm, size=s.size, wire_size=s.wire_size, slice=s.slice, bucket=s.bucket)
            cfg["channels"] = s.channels
            if s.sizes:
                cfg["sizes"] = list(s.wire_sizes)
        elif isinstance(s, StepJob):
            cfg.update(trace_config(s, [h.leaf for h in ranks], ctx.payload_Bps))
        elif isinstance(s, PsJob):
            cfg.update(algorithm="sharded", workers=len(s.workers), servers=len(s.servers), size=s.size, slice=s.slice)
        else:
            cfg.update(algorithm=s.schedule, size=s.activation)
            cfg["pipeline"] = {
                "microbatches": s.microbatches,
                "activation": s.activation,
                "gradient": s.gradient,
                "compute": s.compute,
                "compute_bwd": s.compute_bwd,
                "schedule": s.schedule,
            }
        cfg["sports"] = placed_ports(ctx, cfg, self.name)
        return cfg

    def start(self, ctx: RunContext) -> None:
        cfg = self.config(ctx)
        path = ctx.raw_dir / f"{self.name}.config.json"
        path.write_text(json.dumps(cfg, indent=1))
        for r, h in enumerate(self.members(ctx)):
            # rank 0 holds the barrier: it is ready once every rank is connected and has checked in
            self._spawn(ctx, f"rank{r}", [PYTHON, "-m", "traffic.worker", str(path), str(r)], h.netns, gated=r == 0)

    def parse(self, raw_dir: Path) -> Rows:
        return parse_ranked(raw_dir, self.name)


def connections(cfg: dict[str, Any]) -> list[tuple[int, int]]:
    """(rank, peer id) of every connection the job's ranks open, in order: a rank connects to each higher rank it
    exchanges with, once per channel (peer id ``rank + n x channel``, traffic.worker); every size of a sweep."""
    n = len(cfg["hosts"])
    pairs: set[tuple[int, int]] = set()
    for size in cfg.get("sizes") or [None]:
        for r, prog in enumerate(build_schedule(cfg, size).ranks):
            pairs.update((r, v) for v in (*prog.sends, *prog.recvs) if v % n > r)
    return sorted(pairs)


def flow_key(rank: int, peer: int, n: int) -> str:
    """A connection's placement key: the ranks it joins and its channel, e.g. ``0->3/ch0``."""
    return f"{rank}->{peer % n}/ch{peer // n}"


def placed_ports(ctx: RunContext, cfg: dict[str, Any], job: str) -> dict[str, dict[str, int]]:
    """The config's ``sports``: rank -> peer id -> the placed source port that rank's connection binds (0: the
    kernel picks). The barrier's connections carry no data and stay ephemeral."""
    hosts, n = cfg["hosts"], len(cfg["hosts"])
    out: dict[str, dict[str, int]] = {}
    try:
        for r, v in connections(cfg):
            out.setdefault(str(r), {})[str(v)] = ctx.ports.sport(hosts[r]["name"], job, flow_key(r, v, n))
    except PlacementError as exc:
        raise GeneratorError(str(exc)) from None
    return out


def _ideal(cfg: dict[str, Any], size: int) -> tuple[float, float | None]:
    """The ideal time of one iteration moving ``size`` bytes (collectives' wire size), and the busbw factor."""
    n, rate, kind = len(cfg["hosts"]), cfg["payload_Bps"], cfg["kind"]
    if kind == "ps":
        return formulas.ps_ideal_time(cfg["workers"], cfg["servers"], cfg["size"], rate), None
    if kind == "pipeline":
        p = cfg["pipeline"]
        return formulas.pipeline_ideal_time(n, p["microbatches"], p["compute"], p["compute_bwd"]), None
    if "trace" in cfg:  # a trace or DDP step: its critical path (traffic.trace_job)
        return cfg["ideal_s"], None
    ideal = formulas.ideal_time(kind, cfg["algorithm"], n, size, rate, cfg["leaves"])
    return ideal, formulas.busbw_factor(kind, n)


def parse_ranked(raw_dir: Path, job: str) -> Rows:
    """Pure: rows of iterations, steps (or pipeline) and worker_cpu from a job's config and rank files."""
    cfg = json.loads((raw_dir / f"{job}.config.json").read_text())
    names = [h["name"] for h in cfg["hosts"]]
    size = cfg["wire_size"] if "wire_size" in cfg else cfg["size"]
    iters: dict[int, dict[str, Any]] = {}
    steps: list[dict[str, Any]] = []
    pipe: list[dict[str, Any]] = []
    cpu: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    raw: list[dict[str, Any]] = []  # the step records as the workers wrote them (trace_ops)
    watch: dict[int, list[dict[str, Any]]] = {}  # the watchdog's records by rank (traffic.stalls)
    seen = Counter[int]()
    for r, name in enumerate(names):
        path = raw_dir / f"{job}.rank{r}.jsonl"
        if not path.exists():
            raise GeneratorError(f"job {job}: rank {r} ({name}) wrote no records ({path.name} missing)")
        for rec in read_jsonl(path):
            t = rec["type"]
            if t == "iter":
                first = {
                    "warmup": rec["warmup"],
                    "t_start": rec["t_start"],
                    "t_end": 0.0,
                    "size": rec.get("size", size),
                    "retrans": 0,
                    "timeouts": 0,
                }
                it = iters.setdefault(rec["iter"], first)
                it["t_start"] = min(it["t_start"], rec["t_start"])
                it["t_end"] = max(it["t_end"], rec["t_end"])
                for k in ("retrans", "timeouts"):  # every rank's sockets' count, unknown when one rank's is
                    it[k] = None if it[k] is None or rec.get(k) is None else it[k] + rec[k]
                seen[rec["iter"]] += 1
            elif t == "step" and cfg["kind"] == "pipeline":
                mb, back = divmod(rec["step"], 2)
                peer = names[rec["peer"]] if rec["peer"] >= 0 else ""
                pipe.append(
                    {
                        "job": job,
                        "iter": rec["iter"],
                        "stage": r,
                        "microbatch": mb,
                        "phase": "bwd" if back else "fwd",
                        "op": rec["op"],
                        "peer": peer,
                        "t_start": rec["t_start"],
                        "t_end": rec["t_end"],
                        "bytes": rec["bytes"],
                    }
                )
            elif t == "step":
                raw.append(rec)
                steps.append(
                    {
                        "job": job,
                        "iter": rec["iter"],
                        "rank": name,
                        "step": rec["step"],
                        "op": rec["op"],
                        "peer": names[rec["peer"]] if rec["peer"] >= 0 else "",
                        "t_start": rec["t_start"],
                        "t_end": rec["t_end"],
                        "bytes": rec["bytes"],
                    }
                )
            elif t == "flow":
                dst = names[rec["peer"] % len(names)]
                span = rec["t_end"] - rec["t_start"]
                flows.append(
                    {
                        "job": job,
                        "flow_id": f"{job}.r{r}.p{rec['peer']}",
                        "src": name,
                        "dst": dst,
                        "proto": "tcp",
                        "sport": rec["sport"],
                        "dport": rec["dport"],
                        "bytes": rec["bytes"],
                        "t_start": rec["t_start"],
                        "t_end": rec["t_end"],
                        "goodput_bps": rec["bytes"] * 8 / span if span > 0 else None,
                        "retrans": None,
                        "path": "",
                    }
                )
            elif t == "cpu":
                cpu.append({"job": job, "rank": r, "host": name, "cpu_s": rec["cpu_s"], "wall_s": rec["wall_s"]})
            elif t in ("stall", "stall_end", "watch"):
                watch.setdefault(r, []).append(rec)
    ideal = {sz: _ideal(cfg, sz) for sz in {v["size"] for v in iters.values()}}
    rows = [
        {
            "job": job,
            "kind": cfg["kind"],
            "algorithm": cfg["algorithm"],
            "iter": i,
            "warmup": int(v["warmup"]),
            "t_start": v["t_start"],
            "t_end": v["t_end"],
            "size_bytes": v["size"],
            "ranks": len(names),
            "ideal_s": ideal[v["size"]][0],
            "busbw_factor": ideal[v["size"]][1],
            "compute_s": cfg.get("compute_s"),  # a trace or DDP step's compute alone
            "retrans": v["retrans"],
            "timeouts": v["timeouts"],
        }
        for i, v in sorted(iters.items())
        if seen[i] == len(names)  # an iteration some rank never finished is not one
    ]
    out: Rows = {"iterations": rows, "worker_cpu": cpu, "flows": flows}
    if watch:  # workers with a watchdog: stalls.csv, empty when nothing stalled (older raw files: no table)
        out["stalls"] = stall_rows(job, names, watch)
    if "trace" in cfg:  # trace and ddp: one row per node
        out["trace_ops"] = trace_ops(job, cfg, names, raw)
    out["pipeline" if cfg["kind"] == "pipeline" else "steps"] = pipe if cfg["kind"] == "pipeline" else steps
    return out


def bubble_fraction(pipeline_rows: list[dict[str, Any]], it: int) -> float:
    """Measured bubble of one pipeline iteration: 1 - (compute busy time summed over stages) / (stages x makespan),
    the makespan running from the first to the last compute of any stage."""
    comp = [r for r in pipeline_rows if r["op"] == "compute" and r["iter"] == it]
    if not comp:
        raise ValueError(f"no compute records for iteration {it}")
    stages = {r["stage"] for r in comp}
    span = max(r["t_end"] for r in comp) - min(r["t_start"] for r in comp)
    busy = sum(r["t_end"] - r["t_start"] for r in comp)
    return float(1.0 - busy / (len(stages) * span))
