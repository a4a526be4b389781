"""ECMP balance of one run: the bytes each group of parallel uplinks carried (see results.metrics).

A port's bytes over the run are its last tx_bytes reading less its first (links.csv, else queues.csv).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from results.ports import first_last, split_ports
from results.record import Run
from results.summary import Summary

SPINE_LAYERS = ("spine", "core")


def fabric_ports(run: Run) -> dict[str, dict[str, Any]]:
    """The manifest's ``fabric.ports`` under their ``node:dev`` names."""
    ports = (run.manifest.get("fabric") or {}).get("ports") or []
    return {f"{p['node']}:{p['dev']}": p for p in ports if "node" in p and "dev" in p}


def _port_bytes(run: Run) -> tuple[dict[str, float], str]:
    """tx bytes per ``node:dev`` over the run: from links.csv, else from queues.csv."""
    for name in ("links", "queues"):
        out = {}
        for (node, dev), rs in split_ports(run.table(name), ("tx_bytes",)).items():
            ends = first_last(rs["tx_bytes"])
            if ends is not None:
                out[f"{node}:{dev}"] = ends[1] - ends[0]
        if out:
            return dict(sorted(out.items())), name
    return {}, ""


def ecmp(run: Run, s: Summary) -> None:
    ports = fabric_ports(run)
    if not ports:
        for m in ("ecmp_imbalance", "ecmp_groups", "bytes_per_spine"):
            s.na(m, "the manifest has no fabric.ports")
        return
    groups: dict[str, list[str]] = defaultdict(list)
    for key, p in ports.items():
        if p.get("direction") == "up":
            groups[str(p["node"])].append(key)
    groups = {n: ks for n, ks in groups.items() if len(ks) >= 2}
    sent, source = _port_bytes(run)
    if not sent:
        for m in ("ecmp_imbalance", "ecmp_groups", "bytes_per_spine"):
            s.na(m, "no tx_bytes counters in links.csv or queues.csv")
        return
    per: dict[str, Any] = {}
    for node, keys in sorted(groups.items()):
        b = {k.split(":", 1)[1]: sent[k] for k in sorted(keys) if k in sent}
        if len(b) >= 2 and sum(b.values()) > 0:
            per[node] = {"bytes": b, "imbalance": max(b.values()) / (sum(b.values()) / len(b))}
    if per:
        s.put("ecmp_groups", per)
        s.put("ecmp_imbalance", max(g["imbalance"] for g in per.values()))
        s.put("ecmp_source", source)
    else:
        why = (
            "the fabric has no node with 2 or more up ports (no parallel uplinks)"
            if not groups
            else "no traffic was counted on any group of parallel uplinks"
        )
        s.na("ecmp_imbalance", why)
        s.na("ecmp_groups", why)
    spines: dict[str, float] = defaultdict(float)
    for key, p in ports.items():
        if p.get("direction") == "up" and p.get("peer_layer") in SPINE_LAYERS and key in sent:
            spines[str(p["peer"])] += sent[key]
    if spines:
        s.put("bytes_per_spine", dict(sorted(spines.items())))
    else:
        s.na("bytes_per_spine", f"no counted up port whose peer layer is one of {SPINE_LAYERS}")
