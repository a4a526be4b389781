"""The slowest replayed collective and the queue it waited behind (results/metrics/trace.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from results.metrics import summarize
from results.record import RunRecord, load_run


def _port(node: str, dev: str, peer: str) -> dict[str, Any]:
    return {"node": node, "dev": dev, "peer": peer}


PORTS = [
    _port("h1", "h1-l1", "l1"), _port("h2", "h2-l2", "l2"), _port("h3", "h3-l3", "l3"),
    _port("l1", "l1-h1", "h1"), _port("l1", "l1-s1", "s1"), _port("l2", "l2-h2", "h2"), _port("l2", "l2-s1", "s1"),
    _port("l3", "l3-h3", "h3"), _port("l3", "l3-s1", "s1"),
    _port("s1", "s1-l1", "l1"), _port("s1", "s1-l2", "l2"), _port("s1", "s1-l3", "l3"),
]  # fmt: skip


def _op(it: int, rank: str, node: int, t0: float, t1: float, warm: int = 0, kind: str = "coll") -> dict[str, Any]:
    return {"job": "step", "iter": it, "warmup": warm, "rank": rank, "node_id": node, "name": f"n{node}", "kind": kind,
            "coll": "allreduce", "size": 1000, "group": 2, "t_start": t0, "t_end": t1, "bytes_sent": 500}  # fmt: skip


def _q(t: float, node: str, dev: str, backlog: float) -> dict[str, Any]:
    return {"t": t, "node": node, "dev": dev, "backlog_bytes": backlog, "backlog_pkts": 1, "drops": 0, "marks": 0,
            "overlimits": 0, "tx_bytes": 0, "tx_pkts": 0, "requeues": 0}  # fmt: skip


def _run(tmp_path: Path, ops: list[dict[str, Any]], queues: list[dict[str, Any]]) -> Any:
    rec = RunRecord.create(tmp_path, "m")
    rec.set("fabric", {"ports": PORTS})
    rec.table("trace_ops").write_many(ops)
    if queues:
        rec.table("queues").write_many(queues)
    rec.finish()
    return load_run(rec.path)


def test_slowest_collective_and_its_hottest_queue(tmp_path: Path) -> None:
    """Node 5 of iteration 1 spans 10.0-10.9 s over h1 and h2 (the warm-up's 20 s one does not count); of the
    ports it can cross, l2-h2 held the most then. h3's port, off its path, held more and is not named, nor is
    l1-h1's peak after the collective ended."""
    ops = [
        _op(0, "h1", 5, 0.0, 20.0, warm=1), _op(1, "h1", 5, 10.0, 10.5), _op(1, "h2", 5, 10.1, 10.9),
        _op(1, "h1", 6, 11.0, 11.2), _op(1, "h2", 6, 11.0, 11.3), _op(1, "h1", 7, 9.0, 12.0, kind="comp"),
    ]  # fmt: skip
    queues = [_q(10.5, "l2", "l2-h2", 40_000), _q(10.6, "s1", "s1-l1", 20_000), _q(10.5, "h3", "h3-l3", 90_000),
              _q(11.5, "l1", "l1-h1", 99_000)]  # fmt: skip
    s = summarize(_run(tmp_path, ops, queues))
    c = s["slowest_collective"]
    assert (c["node_id"], c["name"], c["iter"], c["hosts"]) == (5, "n5", 1, ["h1", "h2"])
    assert abs(c["seconds"] - 0.9) < 1e-9
    assert (c["queue"], c["queue_backlog_max_bytes"], c["queue_source"]) == ("l2:l2-h2", 40_000.0, "poller")


def test_without_collectives_or_queue_data(tmp_path: Path) -> None:
    """Only compute replayed: not applicable, with the reason; a collective without queue samples: no queue."""
    s = summarize(_run(tmp_path / "a", [_op(1, "h1", 5, 0.0, 1.0, kind="comp")], []))
    assert s["slowest_collective"] is None and "no measured collective" in s["not_applicable"]["slowest_collective"]
    s = summarize(_run(tmp_path / "b", [_op(1, "h1", 5, 0.0, 1.0)], []))
    assert s["slowest_collective"]["name"] == "n5" and "queue" not in s["slowest_collective"]
