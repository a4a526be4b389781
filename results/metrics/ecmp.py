"""ECMP balance of one run: the bytes each tier of parallel uplinks, and each group of them, carried (see
results.metrics).

A group is a node's uplinks (its ``direction: up`` ports, 2 or more): a leaf's to the spines, a fat-tree edge's to
its pod's aggregation switches, an aggregation switch's to its cores. A tier is every group of one layer towards
the next (``leaf->spine``; ``edge->agg``, ``agg->core``). Balance is max / mean of bytes. A port's bytes over the
run are its last tx_bytes reading less its first (links.csv, else queues.csv).
"""

from __future__ import annotations

import re
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


def _natural(name: str) -> tuple[tuple[int, str, int], ...]:
    """Sort key that orders s2 before s10 and p1a2 before p1a10."""
    return tuple((0, "", int(x)) if x.isdigit() else (1, x, 0) for x in re.findall(r"\d+|\D+", name))


def _imbalance(values: list[float]) -> float:
    """max / mean: 1 when every link carried the same bytes, the number of links when one carried them all."""
    return max(values) / (sum(values) / len(values))


def _tiers(
    ports: dict[str, dict[str, Any]], groups: dict[str, list[str]], sent: dict[str, float]
) -> dict[str, dict[str, Any]]:
    """Each tier's bytes per uplink position, summed over its groups: a group's uplinks in the order of their peers'
    names (the k-th spine; in a fat-tree the k-th aggregation switch of the pod, the k-th core of the aggregation
    switch's group), so that a tier whose every group spread its bytes evenly reads 1 whatever the groups carried.
    A position is named by its peer when every group's k-th uplink goes to the same node (the spines of a
    spine-leaf), else ``uplink k``."""
    tiers: dict[str, list[list[str]]] = defaultdict(list)
    for _, keys in sorted(groups.items()):
        p = ports[keys[0]]
        tiers[f"{p.get('layer')}->{p.get('peer_layer')}"].append(
            sorted(keys, key=lambda k: _natural(str(ports[k]["peer"])))
        )
    out: dict[str, dict[str, Any]] = {}
    for tier, members in sorted(tiers.items()):
        width = max(len(m) for m in members)
        totals = [sum(sent.get(m[i], 0.0) for m in members if i < len(m)) for i in range(width)]
        if sum(totals) <= 0:
            continue
        peers = [{str(ports[m[i]]["peer"]) for m in members if i < len(m)} for i in range(width)]
        names = [next(iter(ps)) if len(ps) == 1 else f"uplink {i + 1}" for i, ps in enumerate(peers)]
        out[tier] = {
            "bytes": dict(zip(names, totals, strict=True)),
            "imbalance": _imbalance(totals),
            "groups": len(members),
        }
    return out


def ecmp(run: Run, s: Summary) -> None:
    """ECMP balance: fabric-wide per tier (``ecmp_tiers``; ``ecmp_imbalance``, the worst tier's) and per group of
    parallel uplinks (``ecmp_groups``; ``ecmp_imbalance_worst_group`` and its node, ``ecmp_worst_group``).

    One group's figure says how its own flows hashed, and with few flows per group a group is often uneven while
    the fabric is not (one leaf's flow on s1, another's on s2): the fabric-wide figure is what load balancing
    achieved, the worst group where it failed locally."""
    names = ("ecmp_imbalance", "ecmp_imbalance_worst_group", "ecmp_worst_group", "ecmp_groups", "ecmp_tiers")
    ports = fabric_ports(run)
    if not ports:
        for m in (*names, "bytes_per_spine"):
            s.na(m, "the manifest has no fabric.ports")
        return
    groups: dict[str, list[str]] = defaultdict(list)
    for key, p in ports.items():
        if p.get("direction") == "up":
            groups[str(p["node"])].append(key)
    groups = {n: ks for n, ks in groups.items() if len(ks) >= 2}
    sent, source = _port_bytes(run)
    if not sent:
        for m in (*names, "bytes_per_spine"):
            s.na(m, "no tx_bytes counters in links.csv or queues.csv")
        return
    per: dict[str, Any] = {}
    for node, keys in sorted(groups.items()):
        b = {k.split(":", 1)[1]: sent[k] for k in sorted(keys) if k in sent}
        if len(b) >= 2 and sum(b.values()) > 0:
            per[node] = {"bytes": b, "imbalance": _imbalance(list(b.values()))}
    tiers = _tiers(ports, {n: ks for n, ks in groups.items() if all(k in sent for k in ks)}, sent)
    none = (
        "the fabric has no node with 2 or more up ports (no parallel uplinks)"
        if not groups
        else "no traffic was counted on any group of parallel uplinks"
    )
    if per:
        worst = max(per, key=lambda n: per[n]["imbalance"])
        s.put("ecmp_groups", per)
        s.put("ecmp_imbalance_worst_group", per[worst]["imbalance"])
        s.put("ecmp_worst_group", worst)
        s.put("ecmp_source", source)
    else:
        for m in ("ecmp_groups", "ecmp_imbalance_worst_group", "ecmp_worst_group"):
            s.na(m, none)
    if tiers:
        s.put("ecmp_tiers", tiers)
        s.put("ecmp_imbalance", max(t["imbalance"] for t in tiers.values()))
    else:
        why = none if not per else f"no group has every uplink counted in {source}.csv"
        for m in ("ecmp_imbalance", "ecmp_tiers"):
            s.na(m, why)
    spines: dict[str, float] = defaultdict(float)
    for key, p in ports.items():
        if p.get("direction") == "up" and p.get("peer_layer") in SPINE_LAYERS and key in sent:
            spines[str(p["peer"])] += sent[key]
    if spines:
        s.put("bytes_per_spine", dict(sorted(spines.items())))
    else:
        s.na("bytes_per_spine", f"no counted up port whose peer layer is one of {SPINE_LAYERS}")
