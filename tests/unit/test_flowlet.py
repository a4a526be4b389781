"""Flowlet counters read back from the per-CPU map, and the config layout the BPF program expects."""

from __future__ import annotations

import re

from testbed.bpf.build import SRC_DIR
from testbed.fabric.flowlet import CFG, STATS, STATS_FIELDS, combine

SRC = SRC_DIR / "flowlet.bpf.c"


def test_combine_sums_counts_and_keeps_the_extremes() -> None:
    cpus = [
        {"packets": 5, "flowlets": 2, "switches": 1, "min_gap_new_ns": 0, "max_gap_kept_ns": 300},
        {"packets": 7, "flowlets": 3, "switches": 2, "min_gap_new_ns": 9_000, "max_gap_kept_ns": 100},
        {"packets": 1, "flowlets": 1, "switches": 0, "min_gap_new_ns": 7_000, "max_gap_kept_ns": 0},
    ]
    assert combine(cpus) == {
        "packets": 13,
        "flowlets": 6,
        "switches": 3,
        "min_gap_new_ns": 7_000,  # a CPU that started none (0) does not count
        "max_gap_kept_ns": 300,
    }
    assert combine([dict.fromkeys(STATS_FIELDS, 0)])["min_gap_new_ns"] == 0


def test_layouts_match_the_program() -> None:
    text = SRC.read_text()
    cfg = re.search(r"struct flowlet_cfg \{(.*?)\};", text, re.S)
    stats = re.search(r"struct flowlet_stats \{(.*?)\};", text, re.S)
    assert cfg and stats
    assert re.findall(r"__u(\d+)", cfg.group(1)) == ["64", "32", "32"] and CFG.size == 16
    assert re.findall(r"__u(\d+)", stats.group(1)) == ["64"] * len(STATS_FIELDS) and STATS.size == 40
