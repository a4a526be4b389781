"""Typed, frozen job specs for a scenario's ``workload:`` list, parsed from plain data.

Every job is a mapping with ``kind`` and ``name``; ``parse_job`` rejects unknown keys and impossible values with a
``SpecError`` naming the key path (``workload[2].size``). Sizes use ``testbed.units`` (``"4MB"`` = 4,000,000 bytes,
``"4MiB"`` = 4,194,304), durations ``"10ms"``, rates ``"10Mbit"``.

Keys common to every kind:
- ``name``: unique job name (required). ``kind``: one of ``KINDS`` (required).
- ``start_after``: seconds after the workload starts before this job starts (default 0).
- ``cc``: per-socket congestion control (``TCP_CONGESTION``) for every TCP socket of the job, e.g. ``cubic``;
  default: the host namespace's default.
Keys of the rank-based kinds (collectives, ps, pipeline):
- ``ranks``: ``all`` (every host, fabric order), ``one_per_leaf`` (first host of each leaf), ``leaf_interleaved``
  (all hosts ordered round-robin across leaves, so every ring hop crosses a spine) or a list of host names.
- ``iterations`` (default 10), ``warmup`` (extra iterations first, flagged warmup, default 1),
  ``compute_gap``: compute time per iteration before the communication (default 0),
  ``timeout``: seconds the job may run before it is failed (default 60).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from testbed.spec import SpecError, check_keys
from testbed.units import parse_bytes, parse_duration, parse_rate
from traffic.spec_fields import (
    choice,
    convert,
    host_list,
    host_pairs,
    integer,
    number,
    ranked_fields,
    size_distribution,
    sub,
)

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
KINDS = (
    *COLLECTIVES,
    "ps",
    "pipeline",
    "iperf",
    "rtt_probe",
    "shortflows",
    "incast",
    "scapy_train",
)
ALGORITHMS = {
    "allreduce": ("ring", "hierarchical", "tree", "halving_doubling"),
    "allgather": ("ring",),
    "reduce_scatter": ("ring",),
    "broadcast": ("ring", "tree"),
    "alltoall": ("pairwise",),
}
COMMON = {"name", "kind", "start_after", "cc"}
RANKED = COMMON | {"ranks", "iterations", "warmup", "compute_gap", "timeout"}


@dataclass(frozen=True)
class JobBase:
    name: str
    kind: str
    start_after: float = 0.0
    cc: str | None = None

    def hosts_used(self) -> tuple[str, ...]:
        """Every host this job names explicitly (``ranks: all`` names none), for the scenario's host check."""
        out: list[str] = []
        for key in ("src", "dst", "receiver", "senders", "workers", "servers", "stages", "ranks", "pairs"):
            value = getattr(self, key, None)
            if isinstance(value, str) and key not in ("ranks",) and value:
                out.append(value)
            elif isinstance(value, tuple):
                for item in value:
                    out.extend(item if isinstance(item, tuple) else (item,))
        return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class RankedJob(JobBase):
    ranks: str | tuple[str, ...] = "all"
    iterations: int = 10
    warmup: int = 1
    compute_gap: float = 0.0
    timeout: float = 60.0


@dataclass(frozen=True)
class CollectiveJob(RankedJob):
    """A collective (``kind`` in COLLECTIVES). Keys beyond the common ones:
    ``size``: the buffer S in bytes (nccl-tests' S: the total buffer for allgather/reduce_scatter/alltoall);
    ``algorithm``: allreduce ring|hierarchical|tree|halving_doubling, broadcast ring|tree (pipelined chain or
    binary tree), others ring (alltoall: pairwise); ``slice``: the pipelining unit a rank forwards as soon as it has
    it (default 32KB: measured here, 128KB slices cost a ring broadcast 17% over its ideal, 32KB 2.5%); ``bucket``: split the buffer into this many buckets, bucket i ready after
    (i+1)/bucket of ``compute_gap`` (overlapped with compute; default 1 = no bucketing); ``compression``: ratio r,
    every message carries S/r bytes (default 1); ``channels``: TCP connections per rank pair, each carrying an
    equal share of every block (all-to-all only; default 4 for all-to-all: more flows for ECMP to spread)."""

    size: int = 4_000_000
    algorithm: str = "ring"
    slice: int = 32_768
    bucket: int = 1
    compression: float = 1.0
    channels: int = 1

    @property
    def wire_size(self) -> int:
        return max(1, int(self.size / self.compression))


@dataclass(frozen=True)
class PsJob(RankedJob):
    """Parameter server: ``workers`` and ``servers`` (host lists, required; ``ranks`` is not used); each worker pushes ``size`` bytes of gradients (sharded S/P per server) then pulls ``size``
    bytes back, all workers at once."""

    workers: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()
    size: int = 4_000_000
    slice: int = 32_768


@dataclass(frozen=True)
class PipelineJob(RankedJob):
    """Pipeline parallelism: ``stages`` (host list, stage order), ``microbatches`` M, ``activation`` and
    ``gradient`` message sizes, ``compute`` time per micro-batch per stage forward (``compute_bwd`` backward,
    default = ``compute``), ``schedule`` gpipe|1f1b (``ranks`` is not used)."""

    stages: tuple[str, ...] = ()
    microbatches: int = 8
    activation: int = 1_000_000
    gradient: int = 1_000_000
    compute: float = 0.05
    compute_bwd: float = 0.05
    schedule: str = "gpipe"


@dataclass(frozen=True)
class IperfJob(JobBase):
    """iperf3 flow(s) src -> dst: ``proto`` tcp|udp, ``rate`` (udp target rate, or a tcp cap), ``duration``,
    ``parallel`` streams, ``on``/``off`` seconds (on/off cycling: repeated clients of ``on`` s separated by ``off``
    s for ``duration`` in total; default long-lived), ``interval`` of the JSON samples (default 0.1 s), ``cport``:
    the client's source port (stream i of ``parallel`` binds cport + i; default ephemeral). With the ECMP seed
    fixed, fixed source ports make every flow's path, and so the collision pattern, the same in every run. The
    server listens on 5201 + the job's index."""

    src: str = ""
    dst: str = ""
    proto: str = "tcp"
    rate_bps: int | None = None
    duration: float = 5.0
    parallel: int = 1
    on: float | None = None
    off: float | None = None
    interval: float = 0.1
    cport: int | None = None

    def cports(self) -> range:
        """The source ports the streams bind (empty: ephemeral)."""
        return range(self.cport, self.cport + self.parallel) if self.cport is not None else range(0)


@dataclass(frozen=True)
class RttProbeJob(JobBase):
    """Latency probe: request/response of ``size`` bytes over TCP (``proto``; or udp) between each [src, dst] of
    ``pairs`` every ``interval`` seconds for ``duration`` seconds; each round trip goes to rtt.csv."""

    pairs: tuple[tuple[str, str], ...] = ()
    interval: float = 0.01
    size: int = 64
    duration: float = 5.0
    proto: str = "tcp"


@dataclass(frozen=True)
class ShortFlowsJob(JobBase):
    """Short flows (``kind: shortflows``: each sender opens ``count`` flows to the receiver, ``concurrency`` at a
    time) or incast (``kind: incast``: ``count`` rounds, in each every sender sends one flow at once).
    ``senders`` (host list), ``receiver``, ``sizes``: a list of [size, weight] (size distribution; one size: a
    single item), ``seed`` of the size draw, ``timeout``."""

    senders: tuple[str, ...] = ()
    receiver: str = ""
    sizes: tuple[tuple[int, float], ...] = ((100_000, 1.0),)
    count: int = 20
    concurrency: int = 1
    seed: int = 1
    timeout: float = 60.0


@dataclass(frozen=True)
class ScapyTrainJob(JobBase):
    """Packet trains from ``src`` to ``dst`` with scapy: ``trains`` bursts of ``burst`` back-to-back packets of
    ``size`` bytes (IP packet), ``gap`` seconds between bursts, ``payload`` roce (UDP 4791 + BTH) or udp, ``ecn``
    ect0|ect1|not_ect|ce, ``capture``: record what arrives at dst (counts, CE marks, order)."""

    src: str = ""
    dst: str = ""
    trains: int = 10
    burst: int = 32
    size: int = 1000
    gap: float = 0.01
    payload: str = "roce"
    ecn: str = "ect0"
    capture: bool = True


JobSpec = CollectiveJob | PsJob | PipelineJob | IperfJob | RttProbeJob | ShortFlowsJob | ScapyTrainJob


def parse_job(data: Any, path: str) -> JobSpec:
    """Build one job spec from a scenario mapping; raise SpecError naming the key path on anything wrong."""
    check_keys(data, set(data) if isinstance(data, Mapping) else set(), path, {"kind", "name"})
    kind = choice(sub(path, "kind"), data["kind"], KINDS)
    name = data["name"]
    if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
        raise SpecError(
            sub(path, "name"),
            f"expected a name of letters, digits, - and _, got {name!r}",
        )
    base: dict[str, Any] = {"name": name, "kind": kind}
    if "start_after" in data:
        base["start_after"] = convert(sub(path, "start_after"), parse_duration, data["start_after"])
    if "cc" in data:
        base["cc"] = choice(sub(path, "cc"), data["cc"], ("reno", "cubic", "bbr", "dctcp"))
    g = data.get
    if kind in COLLECTIVES:
        check_keys(data, RANKED | {"size", "algorithm", "slice", "bucket", "compression", "channels"}, path)
        spec = CollectiveJob(
            **base,
            **ranked_fields(data, path),
            size=convert(sub(path, "size"), parse_bytes, g("size", "4MB")),
            algorithm=choice(
                sub(path, "algorithm"),
                g("algorithm", ALGORITHMS[kind][0]),
                ALGORITHMS[kind],
            ),
            slice=convert(sub(path, "slice"), parse_bytes, g("slice", 32_768)),
            bucket=integer(sub(path, "bucket"), g("bucket", 1), 1, 1024),
            compression=number(sub(path, "compression"), g("compression", 1), 1.0, 1e6),
            channels=integer(sub(path, "channels"), g("channels", 4 if kind == "alltoall" else 1), 1, 64),
        )
        if spec.channels > 1 and kind != "alltoall":
            raise SpecError(sub(path, "channels"), "only all-to-all spreads its blocks over several connections")
        return spec
    if kind == "ps":
        check_keys(
            data,
            (RANKED - {"ranks"}) | {"workers", "servers", "size", "slice"},
            path,
            {"workers", "servers"},
        )
        workers = host_list(sub(path, "workers"), data["workers"])
        servers = host_list(sub(path, "servers"), data["servers"])
        if set(workers) & set(servers):
            raise SpecError(
                sub(path, "servers"),
                f"a host is both worker and server: {sorted(set(workers) & set(servers))}",
            )
        return PsJob(
            **base,
            **ranked_fields(data, path),
            workers=workers,
            servers=servers,
            size=convert(sub(path, "size"), parse_bytes, g("size", "4MB")),
            slice=convert(sub(path, "slice"), parse_bytes, g("slice", 32_768)),
        )
    if kind == "pipeline":
        keys = {
            "stages",
            "microbatches",
            "activation",
            "gradient",
            "compute",
            "compute_bwd",
            "schedule",
        }
        check_keys(data, (RANKED - {"ranks"}) | keys, path, {"stages"})
        compute = convert(sub(path, "compute"), parse_duration, g("compute", 0.05))
        return PipelineJob(
            **base,
            **ranked_fields(data, path),
            stages=host_list(sub(path, "stages"), data["stages"], 2),
            microbatches=integer(sub(path, "microbatches"), g("microbatches", 8), 1, 10_000),
            activation=convert(sub(path, "activation"), parse_bytes, g("activation", "1MB")),
            gradient=convert(sub(path, "gradient"), parse_bytes, g("gradient", "1MB")),
            compute=compute,
            compute_bwd=convert(sub(path, "compute_bwd"), parse_duration, g("compute_bwd", compute)),
            schedule=choice(sub(path, "schedule"), g("schedule", "gpipe"), ("gpipe", "1f1b")),
        )
    if kind == "iperf":
        keys = {
            "src",
            "dst",
            "proto",
            "rate",
            "duration",
            "parallel",
            "on",
            "off",
            "interval",
            "cport",
        }
        check_keys(data, COMMON | keys, path, {"src", "dst"})
        proto = choice(sub(path, "proto"), g("proto", "tcp"), ("tcp", "udp"))
        if proto == "udp" and "rate" not in data:
            raise SpecError(sub(path, "rate"), "a udp flow needs a rate")
        if ("on" in data) != ("off" in data):
            raise SpecError(sub(path, "on" if "on" not in data else "off"), "on and off go together")
        src, dst = host_list(sub(path, "src"), [g("src"), g("dst")], 2)
        parallel = integer(sub(path, "parallel"), g("parallel", 1), 1, 128)
        cport = None
        if "cport" in data:
            cport = integer(sub(path, "cport"), data["cport"], 1024, 65536 - parallel)
            if "on" in data:  # each cycle's new client would bind a port the last one may still hold in TIME_WAIT
                raise SpecError(sub(path, "cport"), "a fixed client port cannot be combined with on/off cycling")
        for key in ("duration", "on"):  # iperf3 3.12 reads -t with atoi: 0.5 would mean "forever"
            if key in data and not float(convert(sub(path, key), parse_duration, data[key])).is_integer():
                raise SpecError(sub(path, key), "iperf3 runs whole seconds only (its -t is an integer)")
        return IperfJob(
            **base,
            src=src,
            dst=dst,
            proto=proto,
            rate_bps=convert(sub(path, "rate"), parse_rate, data["rate"]) if "rate" in data else None,
            duration=convert(sub(path, "duration"), parse_duration, g("duration", 5)),
            parallel=parallel,
            on=convert(sub(path, "on"), parse_duration, data["on"]) if "on" in data else None,
            off=convert(sub(path, "off"), parse_duration, data["off"]) if "off" in data else None,
            interval=convert(sub(path, "interval"), parse_duration, g("interval", 0.1)),
            cport=cport,
        )
    if kind == "rtt_probe":
        check_keys(
            data,
            COMMON | {"pairs", "interval", "size", "duration", "proto"},
            path,
            {"pairs"},
        )
        return RttProbeJob(
            **base,
            pairs=host_pairs(sub(path, "pairs"), data["pairs"]),
            interval=convert(sub(path, "interval"), parse_duration, g("interval", 0.01)),
            size=convert(sub(path, "size"), parse_bytes, g("size", 64)),
            duration=convert(sub(path, "duration"), parse_duration, g("duration", 5)),
            proto=choice(sub(path, "proto"), g("proto", "tcp"), ("tcp", "udp")),
        )
    if kind in ("shortflows", "incast"):
        keys = {
            "senders",
            "receiver",
            "sizes",
            "count",
            "concurrency",
            "seed",
            "timeout",
        }
        check_keys(data, COMMON | keys, path, {"senders", "receiver"})
        senders = host_list(sub(path, "senders"), data["senders"])
        receiver = data["receiver"]
        if not isinstance(receiver, str) or receiver in senders:
            raise SpecError(
                sub(path, "receiver"),
                f"expected a host name that is not a sender, got {receiver!r}",
            )
        return ShortFlowsJob(
            **base,
            senders=senders,
            receiver=receiver,
            sizes=size_distribution(sub(path, "sizes"), g("sizes", "100KB")),
            count=integer(sub(path, "count"), g("count", 20), 1, 100_000),
            concurrency=integer(sub(path, "concurrency"), g("concurrency", 1), 1, 1000),
            seed=integer(sub(path, "seed"), g("seed", 1), 0, 2**31),
            timeout=convert(sub(path, "timeout"), parse_duration, g("timeout", 60)),
        )
    keys = {"src", "dst", "trains", "burst", "size", "gap", "payload", "ecn", "capture"}
    check_keys(data, COMMON | keys, path, {"src", "dst"})
    src, dst = host_list(sub(path, "src"), [g("src"), g("dst")], 2)
    capture = g("capture", True)
    if not isinstance(capture, bool):
        raise SpecError(sub(path, "capture"), f"expected true or false, got {capture!r}")
    return ScapyTrainJob(
        **base,
        src=src,
        dst=dst,
        trains=integer(sub(path, "trains"), g("trains", 10), 1, 100_000),
        burst=integer(sub(path, "burst"), g("burst", 32), 1, 100_000),
        size=integer(sub(path, "size"), g("size", 1000), 64, 9000),
        gap=convert(sub(path, "gap"), parse_duration, g("gap", 0.01)),
        payload=choice(sub(path, "payload"), g("payload", "roce"), ("roce", "udp")),
        ecn=choice(sub(path, "ecn"), g("ecn", "ect0"), ("ect0", "ect1", "not_ect", "ce")),
        capture=capture,
    )


def parse_workload(data: Any, path: str = "workload") -> tuple[JobSpec, ...]:
    """Parse the ``workload:`` list; job names must be unique, and so must fixed client ports on one host."""
    if not isinstance(data, list):
        raise SpecError(path, f"expected a list of jobs, got {type(data).__name__}")
    jobs = tuple(parse_job(item, f"{path}[{i}]") for i, item in enumerate(data))
    seen: set[str] = set()
    bound: dict[tuple[str, int], str] = {}
    for i, job in enumerate(jobs):
        if job.name in seen:
            raise SpecError(f"{path}[{i}].name", f"duplicate job name {job.name!r}")
        seen.add(job.name)
        if isinstance(job, IperfJob):
            for port in job.cports():
                other = bound.setdefault((job.src, port), job.name)
                if other != job.name:
                    raise SpecError(f"{path}[{i}].cport", f"{job.src} port {port} is also bound by job {other!r}")
    return jobs
