"""Deterministic per-rank schedules of collectives, parameter server and pipeline, as pure data.

A schedule is built for all ranks at once (so every send has its matching receive) and each worker takes its own
rank's part. The model: per rank, one ordered send queue per peer, one ordered receive queue per peer and one
ordered compute queue. A send or compute item may depend on tokens ``(peer, count)``: "``count`` messages have
been received from ``peer``" (``peer == COMPUTE`` counts this rank's finished compute items, ``sent_key(p)`` its
messages handed to the socket towards p). Messages are sliced
(``slice`` bytes) and dependencies are per slice, so a rank forwards data as soon as it has it (as NCCL pipelines
its chunks); the step number of a message is the algorithm step it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COMPUTE = -1
Token = tuple[int, int]


def sent_key(peer: int) -> int:
    """Token key counting this rank's messages already handed to the socket towards ``peer``."""
    return -2 - peer


@dataclass(frozen=True)
class Send:
    peer: int
    nbytes: int
    step: int
    deps: tuple[Token, ...] = ()
    not_before: float = 0.0  # seconds after the iteration start (bucketed gradients)


@dataclass(frozen=True)
class Compute:
    seconds: float
    step: int
    deps: tuple[Token, ...] = ()


@dataclass
class RankProgram:
    sends: dict[int, list[Send]] = field(default_factory=dict)
    recvs: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # peer -> [(nbytes, step)]
    computes: list[Compute] = field(default_factory=list)

    def bytes_sent(self) -> int:
        return sum(s.nbytes for q in self.sends.values() for s in q)

    def bytes_received(self) -> int:
        return sum(n for q in self.recvs.values() for n, _ in q)


class Schedule:
    """Builder of a whole job's schedule; ``send`` returns the receiver's token for that message."""

    def __init__(self, n: int):
        self.n = n
        self.ranks = [RankProgram() for _ in range(n)]
        self.not_before = 0.0
        # while a trace node is built (traffic.trace_schedule): every send of rank r also waits for gate[r], and
        # steps count from step_base, so that a step number names its node
        self.gate: dict[int, tuple[Token, ...]] = {}
        self.step_base = 0

    def send(self, src: int, dst: int, nbytes: int, step: int, deps: tuple[Token, ...] = (), channel: int = 0) -> Token:
        """Queue a message src -> dst on TCP connection ``channel`` of the pair (peer ids are ``rank + n x
        channel``); returns the receiver's token for it."""
        if src == dst:
            raise ValueError(f"rank {src} sends to itself")
        vsrc, vdst = src + self.n * channel, dst + self.n * channel
        deps, step = deps + self.gate.get(src, ()), step + self.step_base
        self.ranks[src].sends.setdefault(vdst, []).append(Send(vdst, nbytes, step, deps, self.not_before))
        q = self.ranks[dst].recvs.setdefault(vsrc, [])
        q.append((nbytes, step))
        return (vsrc, len(q))

    def sent(self, src: int, dst: int, channel: int = 0) -> Token:
        """The token (at ``src``) for "every message queued so far from src to dst has been sent"."""
        vdst = dst + self.n * channel
        return (sent_key(vdst), len(self.ranks[src].sends.get(vdst, [])))

    def compute(self, rank: int, seconds: float, step: int, deps: tuple[Token, ...] = ()) -> Token:
        self.ranks[rank].computes.append(Compute(seconds, step + self.step_base, deps))
        return (COMPUTE, len(self.ranks[rank].computes))


def split(total: int, parts: int) -> list[int]:
    """``total`` bytes in ``parts`` near-equal pieces (the first ones one byte larger)."""
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def slices(nbytes: int, slice_bytes: int) -> list[int]:
    return split(nbytes, max(1, -(-nbytes // slice_bytes)))


# ---------------------------------------------------------------------------------------------------------------
# collectives over a list of member ranks (indexes into the job's ranks)


def ring(
    sch: Schedule,
    members: list[int],
    size: int,
    sl: int,
    steps: str,
    step0: int = 0,
    extra: dict[tuple[int, int, int], tuple[Token, ...]] | None = None,
) -> dict[tuple[int, int], list[Token]]:
    """Ring over ``members``; ``steps``: ``allreduce`` (reduce-scatter then all-gather, 2(N-1) steps),
    ``reduce_scatter`` or ``allgather`` (N-1 steps). Step k of rank i sends chunk (i-k) mod N (all-gather phase:
    (i+1-k') mod N), each slice after receiving the same slice of the previous step. ``extra[(i, k, j)]`` adds
    dependencies. Returns, per (member index, chunk), the tokens at which that chunk's slices are final there."""
    n = len(members)
    chunks = split(size, n)
    nsteps = {"allreduce": 2 * (n - 1), "reduce_scatter": n - 1, "allgather": n - 1}[steps]
    got: dict[tuple[int, int], list[Token]] = {}  # (member idx, step) -> tokens per slice received
    final: dict[tuple[int, int], list[Token]] = {}
    for k in range(nsteps):
        for i in range(n):
            c = (i - k) % n if steps == "allgather" or k < n - 1 else (i + 1 - (k - n + 1)) % n
            right = (i + 1) % n
            for j, nb in enumerate(slices(chunks[c], sl)):
                deps: tuple[Token, ...] = (got[(i, k - 1)][j],) if k > 0 else ()
                if extra:
                    deps += extra.get((i, k, j), ())
                tok = sch.send(members[i], members[right], nb, step0 + k, deps)
                got.setdefault((right, k), []).append(tok)
    for i in range(n):  # which chunks end final where, and when
        if steps == "reduce_scatter":
            final[(i, (i + 1) % n)] = got.get((i, n - 2), [])
        elif steps == "allreduce":
            final[(i, (i + 1) % n)] = got[(i, n - 2)] if n > 1 else []
            for kp in range(n - 1):
                final[(i, (i - kp) % n)] = got[(i, n - 1 + kp)]
    return final


def tree_parent(i: int) -> int:
    return (i - 1) // 2


def binary_tree(sch: Schedule, members: list[int], size: int, sl: int, reduce: bool, step0: int = 0) -> None:
    """Binary tree in heap order: optional reduce to member 0, then broadcast from it, pipelined by slice."""
    n = len(members)
    parts = slices(size, sl)
    ready: dict[int, list[tuple[Token, ...]]] = {i: [() for _ in parts] for i in range(n)}
    if reduce:
        up: dict[int, list[list[Token]]] = {i: [[] for _ in parts] for i in range(n)}
        for i in reversed(range(1, n)):  # children before parents, so their tokens exist
            for j, nb in enumerate(parts):
                up[tree_parent(i)][j].append(sch.send(members[i], members[tree_parent(i)], nb, step0, tuple(up[i][j])))
        ready[0] = [tuple(t) for t in up[0]]
    for i in range(1, n):  # broadcast, parents first
        p = tree_parent(i)
        for j, nb in enumerate(parts):
            tok = sch.send(members[p], members[i], nb, step0 + 1, ready[p][j])
            ready[i][j] = (tok,)


def halving_doubling(sch: Schedule, n: int, size: int) -> None:
    """Recursive halving reduce-scatter then recursive doubling all-gather (Rabenseifner); N a power of two.
    Each step waits for the whole previous step (latency algorithm; no slicing)."""
    logn = n.bit_length() - 1
    seg = {i: (0, size) for i in range(n)}
    last: dict[int, tuple[Token, ...]] = {i: () for i in range(n)}
    history: list[dict[int, tuple[int, int]]] = []
    for k in range(logn):
        d = n >> (k + 1)
        new_seg: dict[int, tuple[int, int]] = {}
        new_last: dict[int, tuple[Token, ...]] = {}
        history.append(dict(seg))
        for i in range(n):
            lo, hi = seg[i]
            mid = lo + (hi - lo) // 2
            keep, give = ((lo, mid), (mid, hi)) if i & d == 0 else ((mid, hi), (lo, mid))
            new_seg[i] = keep
            new_last[i ^ d] = (sch.send(i, i ^ d, give[1] - give[0], k, last[i]),)
        seg, last = new_seg, new_last
    for k in reversed(range(logn)):
        d = n >> (k + 1)
        new_last = {}
        for i in range(n):
            lo, hi = seg[i]
            new_last[i ^ d] = (sch.send(i, i ^ d, hi - lo, 2 * logn - 1 - k, last[i]),)
        seg = history[k]
        last = new_last


def hierarchical(sch: Schedule, leaves: list[str], size: int, sl: int) -> None:
    """Reduce inside each leaf to its first rank (the leader), ring all-reduce across leaders, broadcast back
    inside each leaf; pipelined by slice across the three phases. Steps: 0 reduce, 1..2L-2 ring, 2L-1 bcast."""
    order: dict[str, list[int]] = {}
    for r, leaf in enumerate(leaves):
        order.setdefault(leaf, []).append(r)
    groups = list(order.values())
    leaders = [g[0] for g in groups]
    nl = len(leaders)
    chunks = split(size, nl)
    member_tok: dict[tuple[int, int], list[list[Token]]] = {}  # (leader idx, chunk) -> per slice: member tokens
    for li, g in enumerate(groups):
        for c in [(li - k) % nl for k in range(nl)]:
            per: list[list[Token]] = [[] for _ in slices(chunks[c], sl)]
            for m in g[1:]:
                for j, nb in enumerate(slices(chunks[c], sl)):
                    per[j].append(sch.send(m, g[0], nb, 0))
            member_tok[(li, c)] = per
    extra = {}
    for li in range(nl):
        for k in range(nl - 1):
            c = (li - k) % nl
            for j, toks in enumerate(member_tok[(li, c)]):
                extra[(li, k, j)] = tuple(toks)
    final = ring(sch, leaders, size, sl, "allreduce", 1, extra) if nl > 1 else {}
    for li, g in enumerate(groups):
        if nl == 1:
            order_c = [(0, [tuple(t) for t in member_tok[(0, 0)]])]
        else:
            c0 = (li + 1) % nl
            first = [(t, *member_tok[(li, c0)][j]) for j, t in enumerate(final[(li, c0)])]
            order_c = [(c0, first)] + [
                ((li - kp) % nl, [(t,) for t in final[(li, (li - kp) % nl)]]) for kp in range(nl - 1)
            ]
        for m in g[1:]:
            for c, deps in order_c:
                for j, nb in enumerate(slices(chunks[c], sl)):
                    sch.send(g[0], m, nb, 2 * nl - 1, deps[j])


def alltoall(sch: Schedule, n: int, size: int, window: int | None = None, channels: int = 1) -> None:
    """Pairwise all-to-all: in step k (1..N-1) rank i sends its S/N block to rank i+k, split over ``channels``
    connections; with a ``window`` only once its block of step k-window is on the wire (the worker then needs
    TCP_NOTSENT_LOWAT), else all at once. More channels spread a pair's bytes over more ECMP paths, so where the hash
    puts the flows matters less; all at once, every rank takes an (N-1)-sender incast, which shallow buffers drop.
    Runs: docs/bench.md ("All-to-all's channels and windows")."""
    per = split(size, n)
    for i in range(n):
        sent: list[Token] = []
        for off in range(1, n):
            dst = (i + off) % n
            deps = (sent[off - 1 - window],) if window and off - 1 - window >= 0 else ()
            for c, part in enumerate(split(per[dst], channels)):
                sch.send(i, dst, part, off, deps, c)
            sent.append(sch.sent(i, dst))


def collective_schedule(
    kind: str,
    algorithm: str,
    n: int,
    size: int,
    sl: int,
    leaves: list[str] | None = None,
    buckets: int = 1,
    compute_gap: float = 0.0,
    window: int | None = None,
    channels: int = 1,
) -> Schedule:
    """The schedule of one iteration of a collective over ranks 0..n-1 (``leaves[r]``: rank r's leaf, for
    hierarchical). With ``buckets`` > 1 the buffer is split and bucket b may start ``(b+1)/buckets *
    compute_gap`` after the iteration start (gradients become ready during the backward pass)."""
    if n < 2:
        raise ValueError("a collective needs at least 2 ranks")
    sch = Schedule(n)
    for b, part in enumerate(split(size, buckets)):
        sch.not_before = (b + 1) / buckets * compute_gap if buckets > 1 else 0.0
        members = list(range(n))
        if kind in ("allreduce", "allgather", "reduce_scatter") and algorithm == "ring":
            ring(sch, members, part, sl, kind)
        elif kind == "allreduce" and algorithm == "hierarchical":
            if leaves is None or len(leaves) != n:
                raise ValueError("hierarchical all-reduce needs the leaf of every rank")
            hierarchical(sch, leaves, part, sl)
        elif kind == "allreduce" and algorithm == "tree":
            binary_tree(sch, members, part, sl, reduce=True)
        elif kind == "allreduce" and algorithm == "halving_doubling":
            if n & (n - 1):
                raise ValueError(f"halving_doubling needs a power-of-two number of ranks, got {n}")
            halving_doubling(sch, n, part)
        elif kind == "broadcast" and algorithm == "ring":
            parts = slices(part, sl)
            prev: list[tuple[Token, ...]] = [() for _ in parts]
            for i in range(n - 1):
                prev = [(sch.send(i, i + 1, nb, 0, prev[j]),) for j, nb in enumerate(parts)]
        elif kind == "broadcast" and algorithm == "tree":
            binary_tree(sch, members, part, sl, reduce=False)
        elif kind == "alltoall":
            alltoall(sch, n, part, window, channels)
        else:
            raise ValueError(f"no schedule for {kind} with algorithm {algorithm}")
    return sch


def ps_schedule(workers: int, servers: int, size: int, sl: int) -> Schedule:
    """Ranks 0..W-1 are workers, W..W+P-1 servers. Every worker pushes its S/P shard to each server at once
    (step 0); a server returns each slice of its shard (step 1) once every worker's copy of it has arrived."""
    sch = Schedule(workers + servers)
    shards = split(size, servers)
    for p in range(servers):
        srv = workers + p
        parts = slices(shards[p], sl)
        pushed: list[list[Token]] = [[] for _ in parts]
        for w in range(workers):
            for j, nb in enumerate(parts):
                pushed[j].append(sch.send(w, srv, nb, 0))
        for w in range(workers):
            for j, nb in enumerate(parts):
                sch.send(srv, w, nb, 1, tuple(pushed[j]))
    return sch


def pipeline_order(stage: int, stages: int, micro: int, schedule: str) -> list[tuple[str, int]]:
    """The compute order of one stage: [("fwd"|"bwd", microbatch)]: GPipe all forwards then all backwards;
    1F1B: min(P-1-s, M) warm-up forwards, then one forward one backward, then the remaining backwards."""
    if schedule == "gpipe":
        return [("fwd", m) for m in range(micro)] + [("bwd", m) for m in range(micro)]
    warm = min(stages - 1 - stage, micro)
    order = [("fwd", m) for m in range(warm)]
    for i in range(micro - warm):
        order += [("fwd", warm + i), ("bwd", i)]
    return order + [("bwd", m) for m in range(micro - warm, micro)]


def pipeline_step(phase: str, micro: int) -> int:
    return 2 * micro + (0 if phase == "fwd" else 1)


def pipeline_schedule(
    stages: int,
    micro: int,
    act: int,
    grad: int,
    t_fwd: float,
    t_bwd: float,
    schedule: str,
) -> Schedule:
    """Stage s computes in ``pipeline_order``; a forward needs the activation from s-1, a backward the gradient
    from s+1 (they arrive in micro-batch order); each result is sent on as soon as it is computed."""
    sch = Schedule(stages)
    orders = [pipeline_order(s, stages, micro, schedule) for s in range(stages)]
    done: dict[tuple[int, str, int], Token] = {}
    recv: dict[tuple[int, str, int], Token] = {}
    pending = {s: 0 for s in range(stages)}
    # build in dependency order: repeatedly advance every stage whose next item's input message exists
    while any(pending[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while pending[s] < len(orders[s]):
                phase, m = orders[s][pending[s]]
                need = (s, phase, m) if (phase == "fwd" and s > 0) or (phase == "bwd" and s < stages - 1) else None
                if need is not None and need not in recv:
                    break
                deps = (recv[need],) if need is not None else ()
                step = pipeline_step(phase, m)
                done[(s, phase, m)] = sch.compute(s, t_fwd if phase == "fwd" else t_bwd, step, deps)
                if phase == "fwd" and s < stages - 1:
                    recv[(s + 1, "fwd", m)] = sch.send(s, s + 1, act, step, (done[(s, phase, m)],))
                elif phase == "bwd" and s > 0:
                    recv[(s - 1, "bwd", m)] = sch.send(s, s - 1, grad, step, (done[(s, phase, m)],))
                pending[s] += 1
                progressed = True
        if not progressed:
            raise ValueError(f"pipeline schedule {schedule} deadlocks")
    return sch
