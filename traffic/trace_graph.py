"""Training-step traces as one plain graph per rank: MLCommons Chakra execution traces and ASTRA-sim/SimAI text.

A graph is JSON-able data, so a run's config carries it to the workers: ``{"ranks": N, "nodes": [[node, ...] per
rank]}``, each node ``{"id", "name", "kind", "deps"}`` plus, by kind: ``comp`` ``seconds``; ``coll`` ``coll``
(allreduce, allgather, reduce_scatter, alltoall, broadcast), ``size`` (bytes, nccl-tests' S) and ``group`` (trace
ranks; all of them without one); ``send``/``recv`` ``peer``, ``size``, ``tag``; ``nop`` (metadata, memory) nothing.
``deps`` are ids of the same rank's nodes (Chakra's data and control dependencies).

Chakra ``.et`` files (``PATH.RANK.et``, ASTRA-sim's naming) are read with the format's own package, mlc-chakra (its
protobuf schema and length-delimited reader; ``setup.sh`` installs it with pip). The ASTRA-sim 1.x / SimAI text
format is read here: mlc-chakra's text converter knows neither the HYBRID_TRANSFORMER headers nor communicator
groups, and the format is whitespace columns. Anything malformed raises ``SpecError`` naming the file, the line or
node, and the reason.
"""

from __future__ import annotations

import gzip
import json
from collections import deque
from functools import lru_cache
from pathlib import Path
from typing import Any

from testbed.spec.fields import SpecError

COLLS = {0: "allreduce", 2: "allgather", 5: "broadcast", 6: "alltoall", 7: "reduce_scatter", 8: "reduce_scatter"}
UNSUPPORTED = {1: "REDUCE", 3: "GATHER", 4: "SCATTER", 9: "BARRIER"}
TEXT_COMMS = {
    "NONE": None,
    "ALLREDUCE": "allreduce",
    "ALLGATHER": "allgather",
    "REDUCESCATTER": "reduce_scatter",
    "ALLTOALL": "alltoall",
    "BROADCAST": "broadcast",
}
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}


def _attrs(node: Any) -> dict[str, Any]:
    out = {}
    for a in node.attr:
        which = a.WhichOneof("value")
        if which is not None:
            value = getattr(a, which)
            out[a.name] = list(value.values) if which.endswith("_list") else value
    return out


def _open(path: Path) -> Any:
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def read_chakra_rank(path: Path, where: str, groups: dict[str, tuple[int, ...]]) -> list[dict[str, Any]]:
    """One rank's Chakra execution trace as graph nodes."""
    try:
        from chakra.schema.protobuf import et_def_pb2 as et
        from chakra.src.third_party.utils.protolib import decodeMessage
        from google.protobuf.message import DecodeError
    except ImportError as exc:
        raise SpecError(where, f"reading Chakra traces needs mlc-chakra and protobuf ({exc}): run ./setup.sh") from None
    if not path.exists():
        raise SpecError(where, f"{path}: no such file")
    nodes: list[dict[str, Any]] = []
    with _open(path) as fh:
        try:
            if not decodeMessage(fh, et.GlobalMetadata()):
                raise SpecError(where, f"{path}: empty, not a Chakra execution trace")
            while True:
                node = et.Node()
                if not decodeMessage(fh, node):
                    break
                nodes.append(
                    _chakra_node(node, _attrs(node), et, f"{path}: node {node.id} ({node.name})", where, groups)
                )
        except (DecodeError, OSError, EOFError) as exc:
            raise SpecError(where, f"{path}: not a Chakra execution trace after {len(nodes)} nodes ({exc})") from None
    return nodes


def _chakra_node(
    node: Any, attrs: dict[str, Any], et: Any, what: str, where: str, groups: dict[str, tuple[int, ...]]
) -> dict[str, Any]:
    out: dict[str, Any] = {"id": int(node.id), "name": node.name, "deps": sorted({*node.data_deps, *node.ctrl_deps})}

    def need(key: str) -> int:
        if key not in attrs:
            raise SpecError(where, f"{what}: attribute {key} is missing")
        return int(attrs[key])

    if node.type == et.COMP_NODE:
        out.update(kind="comp", seconds=node.duration_micros * 1e-6)
    elif node.type == et.COMM_COLL_NODE:
        ctype = need("comm_type")
        if ctype not in COLLS:
            name = UNSUPPORTED.get(ctype, str(ctype))
            raise SpecError(where, f"{what}: comm_type {name} is not replayed (all-reduce, all-gather, "
                            "reduce-scatter, all-to-all and broadcast are)")  # fmt: skip
        out.update(kind="coll", coll=COLLS[ctype], size=need("comm_size"))
        pg = attrs.get("pg_name")
        if pg not in (None, ""):
            if str(pg) not in groups:
                raise SpecError(where, f"{what}: process group {pg!r} is not in the job's groups")
            out["group"] = list(groups[str(pg)])
    elif node.type in (et.COMM_SEND_NODE, et.COMM_RECV_NODE):
        send = node.type == et.COMM_SEND_NODE
        out.update(kind="send" if send else "recv", peer=need("comm_dst" if send else "comm_src"))
        out.update(size=need("comm_size"), tag=int(attrs.get("comm_tag", 0)))
    else:
        out["kind"] = "nop"
    if out.get("size", 1) < 0 or out.get("seconds", 0) < 0:
        raise SpecError(where, f"{what}: negative size or duration")
    return out


def read_chakra(prefix: Path, ranks: int, where: str, groups: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """``PREFIX.0.et`` ... ``PREFIX.{ranks-1}.et``."""
    nodes = [read_chakra_rank(Path(f"{prefix}.{r}.et"), where, groups) for r in range(ranks)]
    return check_graph({"ranks": ranks, "nodes": nodes}, where, str(prefix))


def read_astra_text(path: Path, ranks: int, where: str, time_unit: str = "ns") -> dict[str, Any]:
    """An ASTRA-sim 1.x / SimAI text workload: line 1 the parallelism (``DATA``, ``MODEL``, ``HYBRID_*``, with
    ``key: value`` pairs such as ``model_parallel_NPU_group: 8``), line 2 the layer count, then per layer ``name
    reserved fwd_time fwd_comm fwd_size ig_time ig_comm ig_size wg_time wg_comm wg_size update_time``.

    The step it stands for, per rank: forward through the layers (a forward collective blocks the next layer),
    then backward from the last layer: weight-gradient compute, its collective started and not waited for, then
    input-gradient compute and its collective (blocking). Groups: DATA puts every collective over all ranks;
    MODEL too; HYBRID_* puts forward and input-gradient collectives over the model-parallel group (consecutive
    blocks of ``model_parallel_NPU_group`` ranks) and weight-gradient ones over the data-parallel group (the
    ranks at the same place in every block)."""
    if not path.exists():
        raise SpecError(where, f"{path}: no such file")
    lines = path.read_text().splitlines()
    if len(lines) < 2:
        raise SpecError(where, f"{path}: line {len(lines) + 1}: expected the parallelism and the layer count")
    head = lines[0].split()
    kind, params = (head[0] if head else ""), _header_params(head[1:])
    if not (kind in ("DATA", "MODEL") or kind.startswith("HYBRID")):
        raise SpecError(where, f"{path}: line 1: unknown parallelism {kind!r} (DATA, MODEL, HYBRID_...)")
    mp = int(params.get("model_parallel_NPU_group", ranks)) if kind.startswith("HYBRID") else ranks
    if mp < 1 or ranks % mp:
        raise SpecError(where, f"{path}: line 1: model_parallel_NPU_group {mp} does not divide {ranks} ranks")
    try:
        count = int(lines[1].split()[0])
    except (ValueError, IndexError):
        raise SpecError(where, f"{path}: line 2: expected the layer count, got {lines[1]!r}") from None
    layers = [_layer(ln, i + 3, path, where) for i, ln in enumerate(lines[2:]) if ln.strip()]
    if len(layers) != count:
        raise SpecError(where, f"{path}: line 2 says {count} layers, the file has {len(layers)}")
    scale = TIME_UNITS[time_unit]
    nodes = [_astra_rank(layers, r, ranks, mp, kind, scale) for r in range(ranks)]
    return check_graph({"ranks": ranks, "nodes": nodes}, where, str(path))


def _header_params(tokens: list[str]) -> dict[str, str]:
    """The header's ``key: value`` pairs (``model_parallel_NPU_group: 8``)."""
    out: dict[str, str] = {}
    for i in range(0, len(tokens) - 1, 2):
        if tokens[i].endswith(":"):
            out[tokens[i][:-1]] = tokens[i + 1]
    return out


def _layer(line: str, lineno: int, path: Path, where: str) -> dict[str, Any]:
    cols = line.split()
    if len(cols) < 12:
        raise SpecError(where, f"{path}: line {lineno}: a layer has 12 columns, this one {len(cols)}")
    out: dict[str, Any] = {"name": cols[0]}
    for phase, (t, c, s) in {"fwd": (2, 3, 4), "ig": (5, 6, 7), "wg": (8, 9, 10)}.items():
        if cols[c] not in TEXT_COMMS:
            raise SpecError(where, f"{path}: line {lineno}: unknown communication {cols[c]!r} "
                            f"({', '.join(TEXT_COMMS)})")  # fmt: skip
        try:
            out[phase] = (float(cols[t]), TEXT_COMMS[cols[c]], int(cols[s]))
        except ValueError:
            raise SpecError(where, f"{path}: line {lineno}: {phase} time and size must be numbers") from None
        if out[phase][0] < 0 or out[phase][2] < 0:
            raise SpecError(where, f"{path}: line {lineno}: negative {phase} time or size")
    return out


def _astra_rank(layers: list[dict[str, Any]], r: int, n: int, mp: int, kind: str, scale: float) -> list[dict[str, Any]]:
    mp_group = list(range(r - r % mp, r - r % mp + mp))
    dp_group = list(range(r % mp, n, mp))
    nodes: list[dict[str, Any]] = []

    def add(name: str, deps: list[int], **kw: Any) -> int:
        nodes.append({"id": len(nodes), "name": name, "deps": deps, **kw})
        return len(nodes) - 1

    def coll(name: str, what: tuple[float, str | None, int], group: list[int], dep: int) -> int | None:
        if what[1] is None or what[2] == 0 or len(group) < 2:
            return None
        return add(name, [dep], kind="coll", coll=what[1], size=what[2], group=group)

    mp_or_all = mp_group if kind.startswith("HYBRID") else list(range(n))
    dp_or_all = dp_group if kind.startswith("HYBRID") else list(range(n))
    last: list[int] = []
    for layer in layers:
        c = add(f"{layer['name']}.fwd", last, kind="comp", seconds=layer["fwd"][0] * scale)
        fc = coll(f"{layer['name']}.fwd_comm", layer["fwd"], mp_or_all, c) if kind != "DATA" else None
        last = [fc if fc is not None else c]
    for layer in reversed(layers):
        wg = add(f"{layer['name']}.wg", last, kind="comp", seconds=layer["wg"][0] * scale)
        coll(f"{layer['name']}.wg_comm", layer["wg"], dp_or_all, wg) if kind != "MODEL" else None
        ig = add(f"{layer['name']}.ig", [wg], kind="comp", seconds=layer["ig"][0] * scale)
        ic = coll(f"{layer['name']}.ig_comm", layer["ig"], mp_or_all, ig) if kind != "DATA" else None
        last = [ic if ic is not None else ig]
    return nodes


def check_graph(graph: dict[str, Any], where: str, source: str) -> dict[str, Any]:
    """Every dependency names a node of the same rank, there is no cycle, peers and groups name ranks."""
    n = graph["ranks"]
    for r, nodes in enumerate(graph["nodes"]):
        ids = {x["id"] for x in nodes}
        if len(ids) != len(nodes):
            raise SpecError(where, f"{source}: rank {r}: node ids repeat")
        for x in nodes:
            what = f"{source}: rank {r} node {x['id']} ({x['name']})"
            missing = [d for d in x["deps"] if d not in ids]
            if missing:
                raise SpecError(where, f"{what}: depends on node {missing[0]}, which rank {r} does not have")
            if x["kind"] in ("send", "recv") and not (0 <= x["peer"] < n and x["peer"] != r):
                raise SpecError(where, f"{what}: peer {x['peer']} is not another of the {n} ranks")
            if x["kind"] == "coll" and (
                r not in x.get("group", [r]) or any(not 0 <= g < n for g in x.get("group", []))
            ):
                raise SpecError(where, f"{what}: its group {x.get('group')} does not hold rank {r} or names no rank")
        order(nodes, f"{source}: rank {r}", where)
    return graph


def order(nodes: list[dict[str, Any]], what: str, where: str) -> list[dict[str, Any]]:
    """The nodes in dependency order (Kahn; ties by position in the file); a cycle is refused."""
    by_id = {x["id"]: x for x in nodes}
    indeg = {x["id"]: len(set(x["deps"])) for x in nodes}
    children: dict[int, list[int]] = {}
    for x in nodes:
        for d in set(x["deps"]):
            children.setdefault(d, []).append(x["id"])
    ready = deque(x["id"] for x in nodes if indeg[x["id"]] == 0)
    out: list[dict[str, Any]] = []
    while ready:
        i = ready.popleft()
        out.append(by_id[i])
        for c in children.get(i, []):
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    if len(out) != len(nodes):
        stuck = next(x for x in nodes if indeg[x["id"]] > 0)
        raise SpecError(where, f"{what}: a dependency cycle through node {stuck['id']} ({stuck['name']})")
    return out


@lru_cache(maxsize=8)
def _load(fmt: str, path: str, ranks: int, groups: tuple[tuple[str, tuple[int, ...]], ...], unit: str) -> str:
    graph = (
        read_chakra(Path(path), ranks, "path", dict(groups))
        if fmt == "chakra"
        else read_astra_text(Path(path), ranks, "path", unit)
    )
    return json.dumps(graph)  # cached as text: every caller gets its own copy


def load_trace(job: Any, ranks: int) -> dict[str, Any]:
    """A trace job's graph over ``ranks`` ranks, compute times stretched by the fabric's scale (``time_scale``);
    ``SpecError`` with path ``path`` when the trace is malformed."""
    graph: dict[str, Any] = json.loads(_load(job.format, job.path, ranks, job.groups, job.time_unit))
    for nodes in graph["nodes"]:
        for x in nodes:
            if x["kind"] == "comp":
                x["seconds"] *= job.time_scale
    return graph
