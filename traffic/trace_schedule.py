"""A trace graph (traffic.trace_graph) compiled into the workers' schedule model (traffic.schedule), and its ideal.

Each rank's nodes are taken in dependency order. A compute node is a compute item; a send a message whose receive
is the matching recv node (the k-th send from a to b is the k-th recv at b from a); a collective is built once all
of its group's members have reached it (the k-th collective over a group at each member, the same kind and size at
all) with the group's algorithm: ring all-reduce, all-gather and reduce-scatter, a chain broadcast from the group's
first rank, pairwise all-to-all. Every message a node sends waits for that node's dependencies at its sender
(``Schedule.gate``), and a node is done at a rank once its messages there are received and handed to the socket.
Step numbers are ``seq x STRIDE + algorithm step``, so ``step // STRIDE`` names the node in steps.csv.

The ideal: the longest path through the graph with compute at its recorded duration, one compute at a time per
rank, and each collective or message at its ideal time on links of the given rate (no latency, no contention).
"""

from __future__ import annotations

from typing import Any

from testbed.spec.fields import SpecError
from traffic import formulas
from traffic.schedule import Schedule, Token, hierarchical, ring, sent_key, slices, split
from traffic.trace_graph import order

STRIDE = 4096  # steps per node: a ring over 2,048 ranks has 4,094


class TraceBuilder:
    def __init__(
        self,
        graph: dict[str, Any],
        slice_bytes: int,
        rate_Bps: float,
        where: str = "trace",
        leaves: list[str] | None = None,
    ):
        self.n, self.sl, self.rate, self.where, self.leaves = graph["ranks"], slice_bytes, rate_Bps, where, leaves
        self.sch = Schedule(self.n)
        self.orders = [order(nodes, f"rank {r}", where) for r, nodes in enumerate(graph["nodes"])]
        self.pos = [0] * self.n
        self.done: dict[tuple[int, int], tuple[Token, ...]] = {}
        self.finish: dict[tuple[int, int], float] = {}
        self.cpu_free = [0.0] * self.n
        self.nth: dict[tuple[int, int], int] = {}  # (rank, node id) -> its place among its kind's matches
        self.counts: dict[tuple[Any, ...], int] = {}
        self.waiting: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}  # collectives met by some members
        self.sends: dict[tuple[int, int, int], tuple[Token, dict[str, Any], float]] = {}
        self.built: list[dict[str, Any]] = []

    def build(self) -> tuple[Schedule, list[dict[str, Any]], float]:
        """The schedule, one entry per built node (seq, id, name, kind, coll, size, ranks), and the ideal time."""
        while any(self.pos[r] < len(self.orders[r]) for r in range(self.n)):
            if not any(self._advance(r) for r in range(self.n)):
                r = next(r for r in range(self.n) if self.pos[r] < len(self.orders[r]))
                x = self.orders[r][self.pos[r]]
                raise SpecError(self.where, f"rank {r} node {x['id']} ({x['name']}): its {x['kind']} is never matched "
                                "by the other ranks (a missing send, receive or collective member)")  # fmt: skip
        ideal = max(self.finish.values(), default=0.0)
        return self.sch, self.built, ideal

    def _deps(self, r: int, x: dict[str, Any]) -> tuple[tuple[Token, ...], float]:
        return _merge(t for d in x["deps"] for t in self.done[(r, d)]), max(
            (self.finish[(r, d)] for d in x["deps"]), default=0.0
        )

    def _seq(self, x: dict[str, Any], ranks: list[int], **kw: Any) -> None:
        self.sch.step_base = len(self.built) * STRIDE
        self.built.append(
            {"seq": len(self.built), "id": x["id"], "name": x["name"], "kind": x["kind"], "ranks": ranks, **kw}
        )

    def _match(self, key: tuple[Any, ...], r: int, x: dict[str, Any]) -> int:
        if (r, x["id"]) not in self.nth:
            self.nth[(r, x["id"])] = self.counts.get(key, 0)
            self.counts[key] = self.nth[(r, x["id"])] + 1
        return self.nth[(r, x["id"])]

    def _advance(self, r: int) -> bool:
        moved = False
        while self.pos[r] < len(self.orders[r]):
            x = self.orders[r][self.pos[r]]
            kind = x["kind"]
            ok = self._coll(r, x) if kind == "coll" else self._recv(r, x) if kind == "recv" else self._local(r, x)
            if not ok:
                break
            moved = True
        return moved

    def _local(self, r: int, x: dict[str, Any]) -> bool:
        deps, t0 = self._deps(r, x)
        if x["kind"] == "comp":
            self._seq(x, [r], seconds=x["seconds"])
            start = max(t0, self.cpu_free[r])
            self.done[(r, x["id"])] = (self.sch.compute(r, x["seconds"], 0, deps),)
            self.finish[(r, x["id"])] = self.cpu_free[r] = start + x["seconds"]
        elif x["kind"] == "send":
            k = self._match(("send", r, x["peer"]), r, x)
            self._seq(x, [r, x["peer"]], size=x["size"])
            self.sch.gate = {r: deps}
            tok = self.sch.send(r, x["peer"], x["size"], 0)
            self.sch.gate = {}
            self.sends[(r, x["peer"], k)] = (tok, x, t0 + x["size"] / self.rate)
            self.done[(r, x["id"])] = (self.sch.sent(r, x["peer"]),)
            self.finish[(r, x["id"])] = t0
        else:  # nop: its dependencies pass through
            self.done[(r, x["id"])], self.finish[(r, x["id"])] = deps, t0
        self.pos[r] += 1
        return True

    def _recv(self, r: int, x: dict[str, Any]) -> bool:
        k = self._match(("recv", x["peer"], r), r, x)
        sent = self.sends.get((x["peer"], r, k))
        if sent is None:
            return False
        tok, s, arrival = sent
        if s["size"] != x["size"]:
            raise SpecError(self.where, f"rank {r} node {x['id']} ({x['name']}) receives {x['size']:,} bytes, "
                            f"rank {x['peer']} node {s['id']} sends {s['size']:,}")  # fmt: skip
        deps, t0 = self._deps(r, x)
        self.done[(r, x["id"])] = _merge((tok, *deps))
        self.finish[(r, x["id"])] = max(t0, arrival)
        self.pos[r] += 1
        return True

    def _coll(self, r: int, x: dict[str, Any]) -> bool:
        group = tuple(x.get("group") or range(self.n))
        key = ("coll", group, self._match(("coll", group, r), r, x))
        met = self.waiting.setdefault(key, {})
        met[r] = x
        if len(met) < len(group):
            return False
        first = met[group[0]]
        for m, y in met.items():
            if (y["coll"], y["size"]) != (first["coll"], first["size"]):
                raise SpecError(self.where, f"collective {key[2]} over ranks {list(group)}: rank {group[0]} node "
                                f"{first['id']} is {first['coll']} of {first['size']:,} bytes, rank {m} node {y['id']} "
                                f"{y['coll']} of {y['size']:,}")  # fmt: skip
        del self.waiting[key]
        deps = {m: self._deps(m, y) for m, y in met.items()}
        self._seq(first, list(group), coll=first["coll"], size=first["size"])
        before = {m: self._lengths(m) for m in group}
        self.sch.gate = {m: d[0] for m, d in deps.items()}
        alg = first.get("algorithm") or _ALG[first["coll"]]
        self._algorithm(first["coll"], alg, list(group), first["size"])
        self.sch.gate = {}
        t0 = max(d[1] for d in deps.values())
        t1 = t0 + (formulas.ideal_time(first["coll"], alg, len(group), first["size"], self.rate, self.leaves)
                   if len(group) > 1 else 0.0)  # fmt: skip
        for m, y in met.items():
            self.done[(m, y["id"])] = _merge(self._new_tokens(m, before[m]) + deps[m][0])
            self.finish[(m, y["id"])] = t1
            self.pos[m] += 1
        return True

    def _lengths(self, m: int) -> tuple[dict[int, int], dict[int, int]]:
        p = self.sch.ranks[m]
        return {v: len(q) for v, q in p.recvs.items()}, {v: len(q) for v, q in p.sends.items()}

    def _new_tokens(self, m: int, before: tuple[dict[int, int], dict[int, int]]) -> tuple[Token, ...]:
        recvs, sends = self._lengths(m)
        toks = [(v, c) for v, c in recvs.items() if c > before[0].get(v, 0)]
        toks += [(sent_key(v), c) for v, c in sends.items() if c > before[1].get(v, 0)]
        return tuple(toks)

    def _algorithm(self, coll: str, alg: str, members: list[int], size: int) -> None:
        sch, m = self.sch, len(members)
        if m < 2:
            return
        if alg == "hierarchical":  # over every rank, by leaf (traffic.schedule)
            if coll != "allreduce" or members != list(range(self.n)) or not self.leaves:
                raise SpecError(self.where, "hierarchical is an all-reduce over every rank, with their leaves known")
            hierarchical(sch, self.leaves, size, self.sl)
        elif coll in ("allreduce", "allgather", "reduce_scatter"):
            ring(sch, members, size, self.sl, coll)
        elif coll == "broadcast":  # a pipelined chain from the group's first rank
            prev: list[tuple[Token, ...]] = [() for _ in slices(size, self.sl)]
            for i in range(m - 1):
                prev = [
                    (sch.send(members[i], members[i + 1], nb, 0, prev[j]),)
                    for j, nb in enumerate(slices(size, self.sl))
                ]
        else:  # alltoall, pairwise: in step k member i sends its block to member i + k
            per = split(size, m)
            for i in range(m):
                for off in range(1, m):
                    sch.send(members[i], members[(i + off) % m], per[(i + off) % m], off)


def _merge(tokens: Any) -> tuple[Token, ...]:
    """One token per key, the highest count: "count messages from peer" holds for every lower count too (a chain
    of collectives would otherwise carry every earlier one's tokens)."""
    most: dict[int, int] = {}
    for key, count in tokens:
        most[key] = max(count, most.get(key, 0))
    return tuple(most.items())


_ALG = {"allreduce": "ring", "allgather": "ring", "reduce_scatter": "ring", "broadcast": "ring", "alltoall": "pairwise"}


def trace_schedule(graph: dict[str, Any], slice_bytes: int, rate_Bps: float = 1.0) -> Schedule:
    return TraceBuilder(graph, slice_bytes, rate_Bps).build()[0]
