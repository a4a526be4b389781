"""nccl-tests factors and ideal times, against hand calculations."""

from __future__ import annotations

import pytest

from traffic import formulas as f

B = 12_500_000.0  # 100 Mbit/s of payload, bytes/s
S = 4_000_000


def test_busbw_factors() -> None:
    assert f.busbw_factor("allreduce", 8) == pytest.approx(1.75)
    assert f.busbw_factor("allgather", 8) == pytest.approx(0.875)
    assert f.busbw_factor("reduce_scatter", 4) == pytest.approx(0.75)
    assert f.busbw_factor("alltoall", 2) == pytest.approx(0.5)
    assert f.busbw_factor("broadcast", 8) == 1.0
    with pytest.raises(ValueError):
        f.busbw_factor("gossip", 8)


def test_algbw_busbw() -> None:
    # 4 MB all-reduce over 8 ranks in 0.56 s: algbw 7.142857 MB/s, busbw x 1.75 = 12.5 MB/s
    assert f.algbw(S, 0.56) == pytest.approx(7_142_857.14, rel=1e-6)
    assert f.busbw("allreduce", 8, S, 0.56) == pytest.approx(12_500_000, rel=1e-6)


def test_ring_allreduce_ideal() -> None:
    # 2 * 7/8 * 4e6 / 12.5e6 = 0.56 s
    assert f.ideal_time("allreduce", "ring", 8, S, B) == pytest.approx(0.56)
    assert f.ideal_time("allreduce", "halving_doubling", 8, S, B) == pytest.approx(0.56)
    # busbw at the ideal time is exactly the link payload rate
    assert f.busbw("allreduce", 8, S, 0.56) == pytest.approx(B)


def test_other_collectives_ideal() -> None:
    assert f.ideal_time("allgather", "ring", 8, S, B) == pytest.approx(0.28)  # 7/8 * 0.32
    assert f.ideal_time("reduce_scatter", "ring", 4, S, B) == pytest.approx(0.24)  # 3/4 * 0.32
    assert f.ideal_time("alltoall", "pairwise", 8, S, B) == pytest.approx(0.28)
    assert f.ideal_time("broadcast", "ring", 8, S, B) == pytest.approx(0.32)
    assert f.ideal_time("broadcast", "tree", 8, S, B) == pytest.approx(0.64)  # a node feeds 2 children


def test_hierarchical_ideal() -> None:
    leaves = ["l1", "l1", "l2", "l2", "l3", "l3", "l4", "l4"]
    # 2 * ((2-1) + 3/4) * 0.32 = 1.12 s
    assert f.ideal_time("allreduce", "hierarchical", 8, S, B, leaves) == pytest.approx(1.12)
    assert f.ideal_time("allreduce", "hierarchical", 3, S, B, ["a", "a", "a"]) == pytest.approx(0.64)
    with pytest.raises(ValueError):
        f.ideal_time("allreduce", "hierarchical", 8, S, B)


def test_tree_allreduce_ideal() -> None:
    assert f.tree_max_load(2, reduce=True) == 1
    assert f.tree_max_load(4, reduce=True) == 2
    assert f.tree_max_load(8, reduce=True) == 3  # node 1: children 3, 4 in, parent out + 2 children out
    assert f.ideal_time("allreduce", "tree", 8, S, B) == pytest.approx(0.96)


def test_ps_and_pipeline() -> None:
    assert f.ps_ideal_time(7, 1, S, B) == pytest.approx(2.24)  # 7 * 0.32
    assert f.ps_ideal_time(2, 4, S, B) == pytest.approx(0.32)  # workers' own links bound it
    assert f.pipeline_ideal_time(4, 8, 0.04, 0.04) == pytest.approx(0.88)  # 11 * 80 ms
    assert f.bubble_fraction_ideal(4, 8) == pytest.approx(3 / 11)
