"""Queue figures from the kernel telemetry's slots read as the poller's samples do (results/queues_kernel.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from results.queues_kernel import held_percentile, per_port

FRAME = 1514
SLOT_S = 100e-6


def test_held_percentile_weights_each_slot_until_the_next_event() -> None:
    # events in slots 10 (peak 3 frames, leaves 2) and 20 (peak 1, leaves 0), span 0..99: 10 empty slots before,
    # 1 at 3 frames, 9 held at 2, 1 at 1 frame, 79 empty after
    slot, peak, last = np.array([10, 20]), np.array([3.0, 1.0]) * FRAME, np.array([2.0, 0.0]) * FRAME
    assert held_percentile(slot, peak, last, (0, 99), 50) == 0.0
    assert held_percentile(slot, peak, last, (0, 99), 95) == 2 * FRAME
    assert held_percentile(slot, peak, last, (0, 99), 99.5) == 3 * FRAME


def _truth(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A queue's backlog after each of its events (times in s): bursts arriving at once, frames leaving one per
    121 us, over 2 s."""
    rnd = np.random.default_rng(seed)
    t, b, now, backlog = [], [], 0.0, 0
    while now < 2.0:
        if rnd.random() < 0.02:  # a burst of 2-20 frames arrives
            backlog += int(rnd.integers(2, 21)) * FRAME
        elif backlog:
            backlog -= FRAME
        now += 121e-6 * (1 + rnd.random())
        t.append(now)
        b.append(backlog)
    return np.array(t), np.array(b, dtype=float)


def _slots(t: np.ndarray, b: np.ndarray) -> pd.DataFrame:
    s = np.floor(t / SLOT_S).astype(np.int64)
    rows = pd.DataFrame({"s": s, "b": b}).groupby("s")["b"].agg(["max", "min", "last"]).reset_index()
    return pd.DataFrame(
        {"t": rows["s"] * SLOT_S, "node": "l1", "dev": "l1-eth1", "backlog_max": rows["max"],
         "backlog_min": rows["min"], "backlog_last": rows["last"], "drops": 0, "marks": 0, "deq_bytes": FRAME}
    )  # fmt: skip


def test_the_kernel_reads_the_same_max_and_p99_as_a_1khz_poller() -> None:
    for seed in range(5):
        t, b = _truth(seed)
        ticks = np.arange(0.0005, 2.0, 1e-3)  # a 1 kHz poller: the backlog held at each tick
        polled = b[np.maximum(np.searchsorted(t, ticks, "right") - 1, 0)]
        got = per_port(_slots(t, b), SLOT_S)["l1:l1-eth1"]
        assert polled.max() <= got["backlog_max_bytes"] == b.max()  # the kernel sees every event
        assert abs(got["backlog_p99_bytes"] - np.percentile(polled, 99)) <= 2 * FRAME, (seed, got)


def test_ports_without_rows_read_as_empty_queues() -> None:
    t, b = _truth(0)
    got = per_port(_slots(t, b), SLOT_S, ["l1:l1-eth1", "s1:s1-eth2"])
    assert got["s1:s1-eth2"] == {"samples": 0, "drops": 0.0, "marks": 0.0, "overlimits": None, "tx_bytes": 0.0,
                                 "backlog_max_bytes": 0.0, "backlog_p99_bytes": 0.0}  # fmt: skip
    assert list(got) == ["l1:l1-eth1", "s1:s1-eth2"]
    assert per_port(pd.DataFrame(), SLOT_S, ["x:y"])["x:y"]["samples"] == 0
