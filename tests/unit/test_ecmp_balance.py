"""ECMP balance fabric-wide per tier and per group of parallel uplinks (results.metrics.ecmp)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from results.metrics import summarize
from results.metrics.ecmp import _natural
from results.record import RunRecord, load_run


def _port(node: str, peer: str, layer: str, peer_layer: str) -> dict[str, Any]:
    return {"node": node, "dev": f"{node}-{peer}", "peer": peer, "layer": layer, "peer_layer": peer_layer,
            "direction": "up", "rate_bps": 100_000_000}  # fmt: skip


def _summary(tmp_path: Path, sent: dict[tuple[str, str, str, str], float]) -> dict[str, Any]:
    """A run whose up ports (node, peer, layer, peer layer) sent these bytes, counted in links.csv."""
    ports = [_port(*key) for key in sent]
    rows = [
        {"t": t, "node": p["node"], "dev": p["dev"], "tx_bytes": b * (t - 10.0), "tx_pkts": 0, "rx_bytes": 0,
         "rx_pkts": 0, "tx_drops": 0}
        for p, b in zip(ports, sent.values(), strict=True)
        for t in (10.0, 11.0)
    ]  # fmt: skip
    rec = RunRecord.create(tmp_path, "m")
    rec.set("fabric", {"topology": "test", "nodes": [], "ports": ports})
    rec.table("links").write_many(rows)
    rec.finish()
    return summarize(load_run(rec.path))


def test_balanced_fabric_with_unbalanced_leaves(tmp_path: Path) -> None:
    """Each spine carried 400 bytes over the four leaves, so the fabric is balanced (1.0), while l2 put 150 on s1
    and 50 on s2 (1.5), the worst leaf; l3 and l4 lean the other way."""
    sent = {}
    for leaf, (s1, s2) in {"l1": (100, 100), "l2": (150, 50), "l3": (70, 130), "l4": (80, 120)}.items():
        sent[(leaf, "s1", "leaf", "spine")] = s1
        sent[(leaf, "s2", "leaf", "spine")] = s2
    s = _summary(tmp_path, sent)
    assert s["ecmp_imbalance"] == pytest.approx(1.0)
    assert s["ecmp_tiers"]["leaf->spine"]["bytes"] == {"s1": 400, "s2": 400}
    assert s["ecmp_tiers"]["leaf->spine"]["groups"] == 4
    assert s["ecmp_worst_group"] == "l2"
    assert s["ecmp_imbalance_worst_group"] == pytest.approx(1.5)
    assert s["ecmp_groups"]["l3"]["imbalance"] == pytest.approx(130 / 100)
    assert s["bytes_per_spine"] == {"s1": 400, "s2": 400}


def test_fat_tree_tiers_by_uplink_position(tmp_path: Path) -> None:
    """k=4: only pod 1 sends. Its edges split evenly between the pod's aggregation switches: edge->agg is 1.0
    although pod 2's uplinks carried nothing (positions, not switches, are compared). p1a1 puts 150 on c1 and 50
    on c2, p1a2 splits evenly: agg->core reads 250 / 200 = 1.25 at position 1, the fabric's figure."""
    sent: dict[tuple[str, str, str, str], float] = {}
    for pod in (1, 2):
        for e in (1, 2):
            for a in (1, 2):
                sent[(f"p{pod}e{e}", f"p{pod}a{a}", "edge", "agg")] = 100 if pod == 1 else 0
        for a, cores in ((1, ("c1", "c2")), (2, ("c3", "c4"))):
            for c in cores:
                busy = {"c1": 150, "c2": 50, "c3": 100, "c4": 100}[c]
                sent[(f"p{pod}a{a}", c, "agg", "core")] = busy if pod == 1 else 0
    s = _summary(tmp_path, sent)
    tiers = s["ecmp_tiers"]
    assert tiers["edge->agg"]["bytes"] == {"uplink 1": 200, "uplink 2": 200}
    assert tiers["edge->agg"]["imbalance"] == pytest.approx(1.0)
    assert tiers["agg->core"]["bytes"] == {"uplink 1": 250, "uplink 2": 150}
    assert s["ecmp_imbalance"] == pytest.approx(1.25)
    assert s["ecmp_worst_group"] == "p1a1" and s["ecmp_imbalance_worst_group"] == pytest.approx(1.5)
    assert "p2e1" not in s["ecmp_groups"]  # a group that carried nothing has no figure


def test_uplinks_in_natural_order() -> None:
    assert sorted(["s10", "s2", "s1"], key=_natural) == ["s1", "s2", "s10"]
    assert sorted(["p1a10", "p1a2"], key=_natural) == ["p1a2", "p1a10"]
