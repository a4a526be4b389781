"""Typed, frozen job specs for a scenario's ``workload:`` list, parsed from plain data.

Every job is a mapping with ``kind`` and ``name``; ``parse_job`` rejects unknown keys and impossible values with a
``SpecError`` naming the key path (``workload[2].size``). Sizes use ``testbed.spec.units`` (``"4MB"`` = 4,000,000 bytes,
``"4MiB"`` = 4,194,304), durations ``"10ms"``, rates ``"10Mbit"``.

Keys common to every kind:
- ``name``: unique job name (required). ``kind``: one of ``KINDS`` (required).
- ``start_after``: seconds after the workload starts before this job starts (default 0).
- ``cc``: per-socket congestion control (``TCP_CONGESTION``) for every TCP socket of the job, e.g. ``cubic``;
  default: the host namespace's default.
- ``dscp``: the DSCP (0..63) of every packet the job sends (``IP_TOS`` on its sockets; a TCP server answers with
  the connection's DSCP, ``tcp_reflect_tos``), which picks its traffic class on ports with ``classes:``.
Keys of the rank-based kinds (collectives, ps, pipeline):
- ``ranks``: ``all`` (every host, fabric order), ``one_per_leaf`` (first host of each leaf), ``leaf_interleaved``
  (all hosts ordered round-robin across leaves, so every ring hop crosses a spine) or a list of host names.
- ``iterations`` (default 10), ``warmup`` (extra iterations first, flagged warmup, default 1),
  ``compute_gap``: compute time per iteration before the communication (default 0),
  ``timeout``: seconds the job may run before it is failed (default 60).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from testbed.spec import fields as f
from testbed.spec.fields import SpecError, check_keys, choice, spec_field, sub

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
KINDS = (
    *COLLECTIVES,
    "trace",
    "ddp",
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
CCS = ("reno", "cubic", "bbr", "dctcp")
NO_RANKS = frozenset({"ranks"})


@dataclass(frozen=True)
class JobBase:
    name: str = spec_field(
        "", f.name, required=True, doc="the job's name, unique in the scenario (letters, digits, - and _)"
    )
    kind: str = spec_field("", f.one_of(*KINDS), required=True, doc="what the job runs")
    start_after: float = spec_field(0.0, f.duration, doc="time after the workload starts before this job starts")
    cc: str | None = spec_field(
        None,
        f.one_of(*CCS),
        doc="congestion control of every TCP socket of the job (TCP_CONGESTION); default: the hosts' transport.cc",
    )
    dscp: int | None = spec_field(
        None,
        f.ints(0, 63),
        doc="DSCP (0..63) of every packet the job sends: picks its traffic class on ports with classes",
    )

    LEAVE_OUT: ClassVar[frozenset[str]] = frozenset()  # inherited keys this kind does not read

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str) -> Any:
        """Read every declared key of this kind, fill the defaults that depend on others, then check the whole."""
        values = f.read_fields(cls, data, path, cls.LEAVE_OUT)
        job = cls(**cls.defaults(values))
        job.check(data, path)
        return job

    @classmethod
    def defaults(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Defaults that depend on other fields (none unless a kind says so)."""
        return values

    def check(self, data: Mapping[str, Any], path: str) -> None:
        """Checks across fields, with the key path of the one to change (none unless a kind says so)."""

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
    ranks: str | tuple[str, ...] = spec_field(
        "all",
        f.rank_list,
        doc="the hosts in rank order: all (fabric order), one_per_leaf, leaf_interleaved, or a list of hosts",
    )
    iterations: int = spec_field(10, f.ints(1, 100_000), doc="measured iterations")
    warmup: int = spec_field(1, f.ints(0, 1000), doc="iterations run first and flagged warm-up")
    compute_gap: float = spec_field(0.0, f.duration, doc="compute time per iteration before its communication")
    timeout: float = spec_field(60.0, f.duration, doc="time the job may run before it is failed")


@dataclass(frozen=True)
class CollectiveJob(RankedJob):
    """A collective (``kind`` in COLLECTIVES). Keys beyond the common ones:
    ``size``: the buffer S in bytes (nccl-tests' S: the total buffer for allgather/reduce_scatter/alltoall);
    ``sizes`` instead: a sweep, as nccl-tests' ``-b -e -f`` (``{min: 64KB, max: 16MB, factor: 2}``) or a list;
    each size runs ``warmup`` then ``iterations`` iterations, smallest first (``size`` is then the largest);
    ``algorithm``: allreduce ring|hierarchical|tree|halving_doubling, broadcast ring|tree (pipelined chain or
    binary tree), others ring (alltoall: pairwise); ``slice``: the pipelining unit a rank forwards as soon as it
    has it (default 32KB: docs/bench.md has what larger slices cost); ``bucket``: split the buffer into this many
    buckets, bucket i ready after (i+1)/bucket of ``compute_gap`` (overlapped with compute; default 1 = no
    bucketing); ``compression``: ratio r, every message carries S/r bytes (default 1); ``channels``: TCP
    connections per rank pair, each carrying an equal share of every block (all-to-all only; default 4 for
    all-to-all: more flows for ECMP to spread)."""

    size: int = spec_field(
        4_000_000,
        f.bytes_,
        doc="the buffer S (nccl-tests' S; the total buffer for allgather, reduce_scatter, alltoall)",
    )
    sizes: tuple[int, ...] = spec_field(
        (), f.size_sweep, doc="instead of size: a sweep of sizes, {min, max, factor} as nccl-tests' -b -e -f, or a list"
    )
    algorithm: str = spec_field(
        "",
        f.one_of(*dict.fromkeys(a for algs in ALGORITHMS.values() for a in algs)),
        doc="allreduce ring|hierarchical|tree|halving_doubling, broadcast ring|tree, alltoall pairwise, others ring",
    )
    slice: int = spec_field(32_768, f.bytes_, doc="the pipelining unit a rank forwards as soon as it has it")
    bucket: int = spec_field(
        1, f.ints(1, 1024), doc="split the buffer into this many buckets, each ready after its share of compute_gap"
    )
    compression: float = spec_field(1.0, f.numbers(1.0, 1e6), doc="ratio r: every message carries S/r bytes")
    channels: int = spec_field(
        0, f.ints(1, 64), doc="TCP connections per rank pair (alltoall only; default 4 for alltoall, else 1)"
    )

    def __post_init__(self) -> None:  # defaults that depend on the kind (all-to-all: 4 channels)
        if not self.algorithm and self.kind in ALGORITHMS:
            object.__setattr__(self, "algorithm", ALGORITHMS[self.kind][0])
        if not self.channels:
            object.__setattr__(self, "channels", 4 if self.kind == "alltoall" else 1)
        if self.sizes:
            object.__setattr__(self, "size", self.sizes[-1])

    def check(self, data: Mapping[str, Any], path: str) -> None:
        if "size" in data and "sizes" in data:
            raise SpecError(sub(path, "sizes"), "give size or sizes, not both")
        choice(sub(path, "algorithm"), self.algorithm, ALGORITHMS[self.kind])
        if self.channels > 1 and self.kind != "alltoall":
            raise SpecError(sub(path, "channels"), "only all-to-all spreads its blocks over several connections")

    @property
    def wire_size(self) -> int:
        return max(1, int(self.size / self.compression))

    @property
    def wire_sizes(self) -> tuple[int, ...]:
        """The bytes each swept size puts on the wire (one size without a sweep), smallest first."""
        return tuple(max(1, int(x / self.compression)) for x in self.sizes or (self.size,))


@dataclass(frozen=True)
class StepJob(RankedJob):
    """A training step replayed as a graph (traffic.trace_job): an imported trace or a DDP step. ``slice`` as for
    collectives; compute times stretch by ``fabric.scale``'s factor like the link rates (``time_scale``, set by the
    scenario, not a scenario key); the step's own compute replaces ``compute_gap``."""

    slice: int = spec_field(32_768, f.bytes_, doc="the pipelining unit a rank forwards as soon as it has it")
    time_scale: float = 1.0

    LEAVE_OUT: ClassVar[frozenset[str]] = frozenset({"compute_gap"})


@dataclass(frozen=True)
class TraceJob(StepJob):
    """A training step replayed from a trace (``kind: trace``; traffic.trace_graph): ``format`` chakra (``path`` is
    the prefix of ``PATH.RANK.et``, one Chakra execution trace per rank, ASTRA-sim's naming) or astra_text
    (``path`` is an ASTRA-sim 1.x / SimAI text workload); a relative path is from the scenario file's directory.
    ``ranks``: the rank map, trace rank i on the i-th host. ``groups``: Chakra process groups by ``pg_name``
    (``{tp0: [0, 1]}``; a collective without one spans every rank). ``time_unit`` of the text format's compute
    times (ns, us, ms; default ns: ASTRA-sim's cycles at 1 GHz). ``slice`` as for collectives. Each iteration
    replays the whole step; compute times stretch by ``fabric.scale``'s factor like the link rates."""

    format: str = spec_field(
        "",
        f.one_of("chakra", "astra_text"),
        required=True,
        doc="chakra (PATH.RANK.et execution traces) or astra_text (an ASTRA-sim 1.x / SimAI text workload)",
    )
    path: str = spec_field(
        "",
        f.text,
        required=True,
        doc="the trace: chakra's file prefix, or the text workload; relative to the scenario file",
    )
    groups: tuple[tuple[str, tuple[int, ...]], ...] = spec_field(
        (), f.rank_groups, doc="Chakra process groups by pg_name, e.g. {tp0: [0, 1]}"
    )
    time_unit: str = spec_field(
        "ns", f.one_of("ns", "us", "ms"), doc="the text format's unit of compute times (chakra carries its own)"
    )

    def check(self, data: Mapping[str, Any], path: str) -> None:
        if self.format == "chakra" and "time_unit" in data:
            raise SpecError(sub(path, "time_unit"), "Chakra traces carry their own unit (microseconds)")
        if self.format == "chakra" and self.groups and isinstance(self.ranks, tuple):
            top = max(r for _, g in self.groups for r in g)
            if top >= len(self.ranks):
                raise SpecError(sub(path, "groups"), f"rank {top} is beyond the {len(self.ranks)} ranks")


@dataclass(frozen=True)
class DdpJob(StepJob):
    """PyTorch-DDP-style data parallelism (``kind: ddp``; traffic.ddp): a model of ``layers`` layers holding
    ``params`` parameters (evenly; or ``layer_params``, a count per layer in forward order) of
    ``bytes_per_param`` bytes of gradient (4: fp32), ``forward`` and ``backward`` compute per layer (a duration or
    a list per layer; forward defaults to half of backward), ``optimizer`` compute after the gradients are in.
    Gradients fill buckets of ``bucket`` bytes (DDP's bucket_cap_mb default, 25 MiB) in backward order; with
    ``overlap`` (default) each bucket is all-reduced as soon as its last layer's backward is done, while the rest
    of the backward runs; without, every bucket waits for the whole backward. Buckets are all-reduced one after
    another (one communication stream), by ``algorithm`` ring or hierarchical (over every rank)."""

    params: int = spec_field(
        0, f.ints(0, 10**13), doc="the model's parameters, spread evenly over its layers (or give layer_params)"
    )
    layer_params: tuple[int, ...] = spec_field(
        (), f.int_list(1), doc="parameters per layer, in forward order (instead of params and layers)"
    )
    layers: int = spec_field(24, f.ints(1, 10_000), doc="the model's layers")
    bytes_per_param: int = spec_field(4, f.ints(1, 8), doc="gradient bytes per parameter (4: fp32)")
    forward: tuple[float, ...] = spec_field(
        (), f.durations, doc="forward compute per layer: one duration or one per layer (default half of backward)"
    )
    backward: tuple[float, ...] = spec_field(
        (), f.durations, required=True, doc="backward compute per layer: one duration or one per layer"
    )
    optimizer: float = spec_field(0.0, f.duration, doc="optimizer compute after the gradients are in")
    bucket: int = spec_field(25 << 20, f.bytes_, doc="gradient bucket size (DDP's bucket_cap_mb)")
    overlap: bool = spec_field(
        True,
        f.boolean,
        doc="all-reduce each bucket as soon as its layers' backward is done (false: after the whole backward)",
    )
    algorithm: str = spec_field(
        "ring", f.one_of("ring", "hierarchical"), doc="the buckets' all-reduce: ring or hierarchical"
    )

    @classmethod
    def defaults(cls, values: dict[str, Any]) -> dict[str, Any]:
        if "layer_params" in values:
            values["layers"] = len(values["layer_params"])
        return values

    def check(self, data: Mapping[str, Any], path: str) -> None:
        if ("params" in data) == ("layer_params" in data):
            raise SpecError(sub(path, "params"), "give params (a total) or layer_params (per layer), one of them")
        if "layer_params" in data and "layers" in data:
            raise SpecError(sub(path, "layers"), "layer_params already gives the layers")
        for key in ("forward", "backward"):
            n = len(getattr(self, key))
            if n not in (0 if key == "forward" else 1, 1, self.layers):
                raise SpecError(sub(path, key), f"one duration or one per layer ({self.layers}), got {n}")
        if self.bucket < 1:
            raise SpecError(sub(path, "bucket"), "must be at least 1 byte")

    def per_layer(self) -> list[tuple[int, float, float]]:
        """(gradient bytes, forward s, backward s) per layer, in forward order."""
        counts = list(self.layer_params) or [self.params // self.layers + (i < self.params % self.layers)
                                             for i in range(self.layers)]  # fmt: skip
        bwd = list(self.backward) * (self.layers if len(self.backward) == 1 else 1)
        fwd = (
            list(self.forward) * (self.layers if len(self.forward) == 1 else 1)
            if self.forward
            else [b / 2 for b in bwd]
        )
        return [(c * self.bytes_per_param, fw, bw) for c, fw, bw in zip(counts, fwd, bwd, strict=True)]


@dataclass(frozen=True)
class PsJob(RankedJob):
    """Parameter server: ``workers`` and ``servers`` (host lists, required; ``ranks`` is not used); each worker
    pushes ``size`` bytes of gradients (sharded S/P per server) then pulls ``size`` bytes back, all workers at
    once."""

    workers: tuple[str, ...] = spec_field(
        (), f.hosts(), required=True, doc="the worker hosts: each pushes size bytes of gradients, then pulls them back"
    )
    servers: tuple[str, ...] = spec_field(
        (), f.hosts(), required=True, doc="the parameter server hosts (the gradients sharded over them)"
    )
    size: int = spec_field(4_000_000, f.bytes_, doc="bytes each worker pushes and pulls per iteration")
    slice: int = spec_field(32_768, f.bytes_, doc="the pipelining unit")

    LEAVE_OUT: ClassVar[frozenset[str]] = NO_RANKS

    def check(self, data: Mapping[str, Any], path: str) -> None:
        both = sorted(set(self.workers) & set(self.servers))
        if both:
            raise SpecError(sub(path, "servers"), f"a host is both worker and server: {both}")


@dataclass(frozen=True)
class PipelineJob(RankedJob):
    """Pipeline parallelism: ``stages`` (host list, stage order), ``microbatches`` M, ``activation`` and
    ``gradient`` message sizes, ``compute`` time per micro-batch per stage forward (``compute_bwd`` backward,
    default = ``compute``), ``schedule`` gpipe|1f1b (``ranks`` is not used)."""

    stages: tuple[str, ...] = spec_field((), f.hosts(2), required=True, doc="the stage hosts, in stage order")
    microbatches: int = spec_field(8, f.ints(1, 10_000), doc="micro-batches per iteration")
    activation: int = spec_field(1_000_000, f.bytes_, doc="bytes of activations a stage sends forward per micro-batch")
    gradient: int = spec_field(1_000_000, f.bytes_, doc="bytes of gradients a stage sends backward per micro-batch")
    compute: float = spec_field(0.05, f.duration, doc="forward compute per micro-batch per stage")
    compute_bwd: float = spec_field(
        0.05, f.duration, doc="backward compute per micro-batch per stage (default: compute)"
    )
    schedule: str = spec_field("gpipe", f.one_of("gpipe", "1f1b"), doc="gpipe or 1f1b")

    LEAVE_OUT: ClassVar[frozenset[str]] = NO_RANKS

    @classmethod
    def defaults(cls, values: dict[str, Any]) -> dict[str, Any]:
        if "compute" in values:
            values.setdefault("compute_bwd", values["compute"])
        return values


@dataclass(frozen=True)
class IperfJob(JobBase):
    """iperf3 flow(s) src -> dst: ``proto`` tcp|udp, ``rate`` (udp target rate, or a tcp cap), ``duration``,
    ``parallel`` streams, ``on``/``off`` seconds (on/off cycling: repeated clients of ``on`` s separated by ``off``
    s for ``duration`` in total; default long-lived), ``interval`` of the JSON samples (default 0.1 s), ``cport``:
    the client's source port (stream i of ``parallel`` binds cport + i; default ephemeral). With the ECMP seed
    fixed, fixed source ports make every flow's path, and so the collision pattern, the same in every run. The
    server listens on 5201 + the job's index."""

    src: str = spec_field("", f.host, required=True, doc="the sending host")
    dst: str = spec_field("", f.host, required=True, doc="the receiving host")
    proto: str = spec_field("tcp", f.one_of("tcp", "udp"), doc="tcp or udp")
    rate_bps: int | None = spec_field(None, f.rate, key="rate", doc="udp's target rate, or a cap on tcp")
    duration: float = spec_field(5.0, f.duration, doc="how long it sends (whole seconds)")
    parallel: int = spec_field(1, f.ints(1, 128), doc="parallel streams")
    on: float | None = spec_field(None, f.duration, doc="on/off cycling: seconds each client runs (with off)")
    off: float | None = spec_field(None, f.duration, doc="on/off cycling: seconds between clients (with on)")
    interval: float = spec_field(0.1, f.duration, doc="interval of iperf3's JSON samples")
    cport: int | None = spec_field(
        None, f.ints(1024, 65535), doc="the client's source port (stream i binds cport + i); default ephemeral"
    )

    def check(self, data: Mapping[str, Any], path: str) -> None:
        if self.src == self.dst:
            raise SpecError(sub(path, "src"), f"host names repeat: {[self.src, self.dst]!r}")
        if self.proto == "udp" and self.rate_bps is None:
            raise SpecError(sub(path, "rate"), "a udp flow needs a rate")
        if (self.on is None) != (self.off is None):
            raise SpecError(sub(path, "off" if self.off is None else "on"), "on and off go together")
        if self.cport is not None:
            f.integer(sub(path, "cport"), self.cport, 1024, 65536 - self.parallel)
            if self.on is not None:  # each cycle's new client would bind a port the last one may still hold
                raise SpecError(sub(path, "cport"), "a fixed client port cannot be combined with on/off cycling")
        for key in ("duration", "on"):  # iperf3 3.12 reads -t with atoi: 0.5 would mean "forever"
            value = getattr(self, key)
            if key in data and value is not None and not float(value).is_integer():
                raise SpecError(sub(path, key), "iperf3 runs whole seconds only (its -t is an integer)")

    def cports(self) -> range:
        """The source ports the streams bind (empty: ephemeral)."""
        return range(self.cport, self.cport + self.parallel) if self.cport is not None else range(0)


MIN_PROBE_INTERVAL_S = 0.001  # the probe sends from Python: at most a thousand requests a second


@dataclass(frozen=True)
class RttProbeJob(JobBase):
    """Latency probe from each [src, dst] of ``pairs``: a ``size``-byte request in every slot of ``interval``
    (slot k at the start + k * interval) for ``duration``, echoed by dst; rtt.csv gets one row per slot. Requests
    go out on schedule whatever the answers do, several outstanding as with ``ping -i`` (traffic/rtt_probe.py).
    ``proto``: ``tcp`` (default; one connection, requests pipelined on it: the latency a TCP flow's small messages
    see, head-of-line waiting and retransmissions included) or ``udp`` (a datagram each, as irtt: a loss is a
    loss)."""

    pairs: tuple[tuple[str, str], ...] = spec_field(
        (), f.host_pairs, required=True, doc="[src, dst] host pairs to probe"
    )
    interval: float = spec_field(0.01, f.duration, doc="time between probes (at least 1 ms)")
    size: int = spec_field(64, f.bytes_, doc="bytes per request")
    duration: float = spec_field(5.0, f.duration, doc="how long it probes")
    proto: str = spec_field(
        "tcp", f.one_of("tcp", "udp"), doc="tcp (one connection, requests pipelined) or udp (a datagram each)"
    )

    def check(self, data: Mapping[str, Any], path: str) -> None:
        if self.interval < MIN_PROBE_INTERVAL_S:
            raise SpecError(
                sub(path, "interval"), f"at least {MIN_PROBE_INTERVAL_S * 1e3:g}ms, got {self.interval:g} s"
            )
        if self.duration < self.interval:
            raise SpecError(sub(path, "duration"), f"shorter than one interval ({self.interval:g} s): no slot to send")

    @property
    def slots(self) -> int:
        """The number of slots: every k >= 0 with k * interval < ``duration`` (600 for 6 s at 10 ms)."""
        return math.ceil(self.duration / self.interval - 1e-9)


@dataclass(frozen=True)
class ShortFlowsJob(JobBase):
    """Short flows (``kind: shortflows``: each sender opens ``count`` flows to the receiver, ``concurrency`` at a
    time) or incast (``kind: incast``: ``count`` rounds, in each every sender sends one flow at once).
    ``senders`` (host list), ``receiver``, ``sizes``: a list of [size, weight] (size distribution; one size: a
    single item), ``seed`` of the size draw, ``timeout``."""

    senders: tuple[str, ...] = spec_field((), f.hosts(), required=True, doc="the sending hosts")
    receiver: str = spec_field("", f.host, required=True, doc="the receiving host")
    sizes: tuple[tuple[int, float], ...] = spec_field(
        ((100_000, 1.0),), f.size_distribution, doc="flow size, or a list of [size, weight]: the size distribution"
    )
    count: int = spec_field(20, f.ints(1, 100_000), doc="flows per sender (shortflows), or rounds (incast)")
    concurrency: int = spec_field(1, f.ints(1, 1000), doc="flows open at once per sender (shortflows)")
    seed: int = spec_field(1, f.ints(0, 2**31), doc="seed of the size draw")
    timeout: float = spec_field(60.0, f.duration, doc="time the job may run before it is failed")

    def check(self, data: Mapping[str, Any], path: str) -> None:
        if self.receiver in self.senders:
            raise SpecError(sub(path, "receiver"), f"expected a host name that is not a sender, got {self.receiver!r}")


@dataclass(frozen=True)
class ScapyTrainJob(JobBase):
    """Packet trains from ``src`` to ``dst`` with scapy: ``trains`` bursts of ``burst`` back-to-back packets of
    ``size`` bytes (IP packet), ``gap`` seconds between bursts, ``payload`` roce (UDP 4791 + BTH) or udp, ``ecn``
    ect0|ect1|not_ect|ce, ``capture``: record what arrives at dst (counts, CE marks, order)."""

    src: str = spec_field("", f.host, required=True, doc="the sending host")
    dst: str = spec_field("", f.host, required=True, doc="the receiving host")
    trains: int = spec_field(10, f.ints(1, 100_000), doc="bursts sent")
    burst: int = spec_field(32, f.ints(1, 100_000), doc="back-to-back packets per burst")
    size: int = spec_field(1000, f.ints(64, 9000), doc="bytes per IP packet")
    gap: float = spec_field(0.01, f.duration, doc="time between bursts")
    payload: str = spec_field("roce", f.one_of("roce", "udp"), doc="roce (UDP 4791 + BTH) or udp")
    ecn: str = spec_field(
        "ect0", f.one_of("ect0", "ect1", "not_ect", "ce"), doc="the packets' ECN codepoint: ect0, ect1, not_ect or ce"
    )
    capture: bool = spec_field(True, f.boolean, doc="record what arrives at dst (counts, CE marks, order)")

    def check(self, data: Mapping[str, Any], path: str) -> None:
        if self.src == self.dst:
            raise SpecError(sub(path, "src"), f"host names repeat: {[self.src, self.dst]!r}")


JobSpec = (
    CollectiveJob | TraceJob | DdpJob | PsJob | PipelineJob | IperfJob | RttProbeJob | ShortFlowsJob | ScapyTrainJob
)
SPEC_OF: dict[str, type[JobBase]] = {
    **dict.fromkeys(COLLECTIVES, CollectiveJob),
    "trace": TraceJob,
    "ddp": DdpJob,
    "ps": PsJob,
    "pipeline": PipelineJob,
    "iperf": IperfJob,
    "rtt_probe": RttProbeJob,
    "shortflows": ShortFlowsJob,
    "incast": ShortFlowsJob,
    "scapy_train": ScapyTrainJob,
}


def parse_job(data: Any, path: str) -> JobSpec:
    """Build one job spec from a scenario mapping; raise SpecError naming the key path on anything wrong."""
    check_keys(data, set(data) if isinstance(data, Mapping) else set(), path, {"kind", "name"})
    kind = choice(sub(path, "kind"), data["kind"], KINDS)
    f.name(sub(path, "name"), data["name"])
    job: JobSpec = SPEC_OF[kind].from_dict(data, path)
    return job


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
