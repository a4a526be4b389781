"""nccl-tests' bandwidth vocabulary and the ideal (bandwidth-bound) times of the schedules in traffic.schedule.

``B`` is the per-host link payload rate in bytes/s (``LinkSpec.payload_rate_bps / 8``: TCP payload per frame),
``S`` the message size in bytes as nccl-tests counts it (the whole buffer; for all-gather, reduce-scatter and
all-to-all S is the total buffer, each rank owning S/N), ``n`` the number of ranks.
"""

from __future__ import annotations

from collections import Counter


def busbw_factor(kind: str, n: int) -> float:
    """nccl-tests: busbw = algbw x factor; all-reduce 2(n-1)/n, all-gather/reduce-scatter/all-to-all (n-1)/n,
    broadcast (and reduce, sendrecv) 1."""
    if kind == "allreduce":
        return 2 * (n - 1) / n
    if kind in ("allgather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    if kind in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ValueError(f"no busbw factor for {kind!r}")


def algbw(size: float, seconds: float) -> float:
    """Bytes per second: S / t."""
    return size / seconds


def busbw(kind: str, n: int, size: float, seconds: float) -> float:
    return algbw(size, seconds) * busbw_factor(kind, n)


def tree_max_load(n: int, reduce: bool) -> int:
    """Largest number of S-sized transfers on one host's link in one direction for the heap-ordered binary tree:
    broadcast: a node with 2 children sends 2S (1S in); all-reduce adds the reduce up (its children's 2S in, 1S
    out to its parent), pipelined: an inner node with 2 children carries 3S each way, the root 2S."""
    loads = []
    for i in range(n):
        kids = len([c for c in (2 * i + 1, 2 * i + 2) if c < n])
        up = 1 if i > 0 else 0
        out_b, in_b = kids, up
        if reduce:
            out_b, in_b = out_b + up, in_b + kids
        loads.append(max(out_b, in_b))
    return max(loads)


def ideal_time(kind: str, algorithm: str, n: int, size: float, rate: float, leaves: list[str] | None = None) -> float:
    """Ideal time of one iteration of the collective on links of ``rate`` bytes/s (no latency, no contention).

    - all-reduce ring and halving_doubling: 2(n-1)/n x S/B (bandwidth-optimal).
    - all-reduce hierarchical (h ranks on the busiest leaf, L leaves): 2((h-1) + (L-1)/L) x S/B: the leader's link
      carries the intra-leaf reduce with the cross-leaf reduce-scatter, then the all-gather with the broadcast;
      (h-1) x S/B when everything is on one leaf (reduce and broadcast pipelined).
    - all-reduce tree (binary, pipelined): tree_max_load(n, reduce=True) x S/B (3 S/B for n >= 5).
    - all-gather, reduce-scatter (ring), all-to-all (pairwise): (n-1)/n x S/B.
    - broadcast: ring (pipelined chain) S/B; tree 2 S/B (n >= 3).
    """
    if kind == "allreduce" and algorithm in ("ring", "halving_doubling"):
        return 2 * (n - 1) / n * size / rate
    if kind == "allreduce" and algorithm == "hierarchical":
        if not leaves or len(leaves) != n:
            raise ValueError("hierarchical needs the leaf of every rank")
        per_leaf = Counter(leaves)
        h, nl = max(per_leaf.values()), len(per_leaf)
        if nl == 1:
            return (h - 1) * size / rate
        return 2 * ((h - 1) + (nl - 1) / nl) * size / rate
    if kind in ("allreduce", "broadcast") and algorithm == "tree":
        return tree_max_load(n, reduce=kind == "allreduce") * size / rate
    if kind in ("allgather", "reduce_scatter", "alltoall"):
        return (n - 1) / n * size / rate
    if kind == "broadcast":
        return size / rate
    raise ValueError(f"no ideal time for {kind} / {algorithm}")


def ps_ideal_time(workers: int, servers: int, size: float, rate: float) -> float:
    """Parameter server, push and pull pipelined by slice: a server's link carries W x S/P each way, a worker's
    S each way: max(W/P, 1) x S/B."""
    return max(workers / servers, 1.0) * size / rate


def pipeline_ideal_time(stages: int, micro: int, t_fwd: float, t_bwd: float) -> float:
    """Compute-bound GPipe/1F1B iteration: (M + P - 1) x (t_fwd + t_bwd) (communication not counted)."""
    return (micro + stages - 1) * (t_fwd + t_bwd)


def bubble_fraction_ideal(stages: int, micro: int) -> float:
    """GPipe's (and 1F1B's) idle share of each stage: (P - 1) / (M + P - 1)."""
    return (stages - 1) / (micro + stages - 1)
