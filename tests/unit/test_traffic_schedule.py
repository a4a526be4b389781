"""Schedules: every send has its receive, nothing deadlocks, bytes per rank match the formulas."""

from __future__ import annotations

import pytest

from traffic import formulas
from traffic.schedule import (
    COMPUTE,
    Schedule,
    collective_schedule,
    pipeline_order,
    pipeline_schedule,
    ps_schedule,
    sent_key,
)

S = 4_000_000


def execute(sch: Schedule) -> list[tuple[int, str, int, int]]:
    """Abstract execution: deliver every message whose dependencies are met, in queue order, until done.
    Returns the completion order as (rank, what, peer, step); raises on a deadlock."""
    n = sch.n
    counts = [dict[int, int]() for _ in range(n)]
    send_pos = [dict.fromkeys(p.sends, 0) for p in sch.ranks]
    comp_pos = [0] * n
    order = []

    def ok(r: int, deps: tuple[tuple[int, int], ...]) -> bool:
        return all(counts[r].get(p, 0) >= c for p, c in deps)

    progressed = True
    while progressed:
        progressed = False
        for r, prog in enumerate(sch.ranks):
            while comp_pos[r] < len(prog.computes) and ok(r, prog.computes[comp_pos[r]].deps):
                order.append((r, "compute", -1, prog.computes[comp_pos[r]].step))
                comp_pos[r] += 1
                counts[r][COMPUTE] = counts[r].get(COMPUTE, 0) + 1
                progressed = True
            for v, q in prog.sends.items():
                while send_pos[r][v] < len(q) and ok(r, q[send_pos[r][v]].deps):
                    msg = q[send_pos[r][v]]
                    send_pos[r][v] += 1
                    dst, ch = v % n, v // n
                    counts[dst][r + n * ch] = counts[dst].get(r + n * ch, 0) + 1
                    counts[r][sent_key(v)] = counts[r].get(sent_key(v), 0) + 1
                    order.append((r, "send", dst, msg.step))
                    progressed = True
    for r, prog in enumerate(sch.ranks):
        assert all(send_pos[r][v] == len(q) for v, q in prog.sends.items()), f"rank {r} deadlocked"
        assert comp_pos[r] == len(prog.computes), f"rank {r} compute deadlocked"
        for v, q in prog.recvs.items():
            assert counts[r].get(v, 0) == len(q), f"rank {r} misses messages from {v}"
    return order


def sizes_match(sch: Schedule) -> None:
    n = sch.n
    for r, prog in enumerate(sch.ranks):
        for v, q in prog.sends.items():
            back = sch.ranks[v % n].recvs[r + n * (v // n)]
            assert [m.nbytes for m in q] == [b for b, _ in back]


CASES = [
    ("allreduce", "ring", 8),
    ("allreduce", "ring", 3),
    ("allreduce", "hierarchical", 8),
    ("allreduce", "tree", 8),
    ("allreduce", "tree", 5),
    ("allreduce", "halving_doubling", 8),
    ("allgather", "ring", 8),
    ("reduce_scatter", "ring", 8),
    ("broadcast", "ring", 8),
    ("broadcast", "tree", 8),
    ("alltoall", "pairwise", 8),
]


@pytest.mark.parametrize(("kind", "algo", "n"), CASES)
def test_collectives_complete(kind: str, algo: str, n: int) -> None:
    leaves = [f"l{i // 2}" for i in range(n)]
    sch = collective_schedule(kind, algo, n, S, 32_768, leaves, channels=4 if kind == "alltoall" else 1)
    sizes_match(sch)
    execute(sch)


@pytest.mark.parametrize(("kind", "algo", "n"), CASES)
def test_busiest_link_load_matches_ideal(kind: str, algo: str, n: int) -> None:
    """The ideal formula equals the most bytes one host sends or receives (B = 1 byte/s), except hierarchical
    whose phases do not fully overlap (formula: 2 x the leader's busiest phase)."""
    leaves = [f"l{i // 2}" for i in range(n)]
    sch = collective_schedule(kind, algo, n, S, 32_768, leaves)
    load = max(max(p.bytes_sent(), p.bytes_received()) for p in sch.ranks)
    ideal = formulas.ideal_time(kind, algo, n, S, 1.0, leaves)
    if algo == "hierarchical":
        assert load == pytest.approx(S * (1 + 2 * 3 / 4))  # leader: member's S + ring 1.5 S, each way
        assert ideal == pytest.approx(2 * S * (1 + 3 / 4))
    else:
        assert load == pytest.approx(ideal, rel=1e-6)


def test_ring_steps_and_dependencies() -> None:
    sch = collective_schedule("allreduce", "ring", 4, 4000, 1000)
    prog = sch.ranks[0]
    assert list(prog.sends) == [1] and list(prog.recvs) == [3]
    assert [m.step for m in prog.sends[1]] == list(range(6))  # 2(N-1) steps of one 1000-byte slice
    assert prog.sends[1][0].deps == () and prog.sends[1][1].deps == ((3, 1),)  # step 1 waits for step 0's data


def test_hierarchical_spine_bytes() -> None:
    leaves = ["a", "a", "b", "b", "c", "c", "d", "d"]
    sch = collective_schedule("allreduce", "hierarchical", 8, S, 32_768, leaves)
    cross = sum(
        m.nbytes for r, p in enumerate(sch.ranks) for v, q in p.sends.items() for m in q if leaves[r] != leaves[v % 8]
    )
    assert cross == 2 * 3 * S  # 2(L-1) S across leaves, vs 2(N-1) S = 14 S for a ring crossing leaves every hop


def test_halving_doubling_needs_power_of_two() -> None:
    with pytest.raises(ValueError, match="power-of-two"):
        collective_schedule("allreduce", "halving_doubling", 6, S, 32_768)


def test_bucketing_splits_and_delays() -> None:
    sch = collective_schedule("allreduce", "ring", 4, 4000, 10_000, buckets=2, compute_gap=0.1)
    nb = sorted({m.not_before for m in sch.ranks[0].sends[1]})
    assert nb == [0.05, 0.1]
    assert sch.ranks[0].bytes_sent() == 2 * 3 * 4000 // 4


def test_ps_schedule() -> None:
    sch = ps_schedule(7, 1, 700_000, 32_768)
    execute(sch)
    server = sch.ranks[7]
    assert server.bytes_received() == 7 * 700_000 and server.bytes_sent() == 7 * 700_000
    assert all(p.bytes_sent() == 700_000 for p in sch.ranks[:7])


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_schedule_order(schedule: str) -> None:
    sch = pipeline_schedule(4, 8, 1000, 1000, 0.01, 0.02, schedule)
    execute(sch)
    for s in range(4):
        steps = [c.step for c in sch.ranks[s].computes]
        assert steps == [2 * m + (ph == "bwd") for ph, m in pipeline_order(s, 4, 8, schedule)]


def test_pipeline_orders() -> None:
    assert pipeline_order(0, 2, 3, "gpipe") == [("fwd", 0), ("fwd", 1), ("fwd", 2), ("bwd", 0), ("bwd", 1), ("bwd", 2)]
    assert pipeline_order(0, 4, 4, "1f1b")[:4] == [("fwd", 0), ("fwd", 1), ("fwd", 2), ("fwd", 3)]
    assert pipeline_order(3, 4, 3, "1f1b") == [("fwd", 0), ("bwd", 0), ("fwd", 1), ("bwd", 1), ("fwd", 2), ("bwd", 2)]
