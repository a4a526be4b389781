"""Per-flow bytes per spine (testbed.fabric.pathbytes): the nft set's JSON, the match to flows, the top tier."""

from __future__ import annotations

import json

from testbed.fabric.pathbytes import SET_SIZE, Counted, parse_set, per_flow, top_tier
from testbed.spec.fabric import FabricSpec
from testbed.spec.topology import Topology

# as nft 1.0.6 prints it (measured here), trimmed to two elements
LISTED = {
    "nftables": [
        {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
        {
            "set": {
                "family": "ip",
                "name": "flows",
                "table": "testbed_paths",
                "size": SET_SIZE,
                "elem": [
                    {
                        "elem": {
                            "val": {"concat": ["10.0.1.1", "10.0.2.1", "tcp", 40000, 5201]},
                            "counter": {"packets": 10, "bytes": 15000},
                        }
                    },
                    {
                        "elem": {
                            "val": {"concat": ["10.0.1.2", "10.0.2.2", "udp", 1, 2]},
                            "counter": {"packets": 1, "bytes": 64},
                        }
                    },
                ],
            }
        },
    ]
}


def test_parse_set_reads_each_5_tuple_and_its_counter() -> None:
    got = parse_set(json.dumps(LISTED))
    assert got == {
        ("10.0.1.1", "10.0.2.1", "tcp", 40000, 5201): Counted(15000, 10),
        ("10.0.1.2", "10.0.2.2", "udp", 1, 2): Counted(64, 1),
    }


def test_an_empty_set_has_no_elements() -> None:
    empty = {"nftables": [{"metainfo": {}}, {"set": {"name": "flows", "table": "testbed_paths"}}]}
    assert parse_set(json.dumps(empty)) == {}


def test_per_flow_splits_a_flow_over_the_spines_that_carried_it() -> None:
    key = ("10.0.1.1", "10.0.2.1", "tcp", 40000, 5201)
    other = ("10.0.1.1", "10.0.2.1", "tcp", 40001, 5201)  # no flow of the record owns it (iperf3's control)
    counted = {"s1": {key: Counted(600, 4), other: Counted(50, 1)}, "s2": {key: Counted(400, 3)}}
    flows = [
        {"job": "j", "flow_id": 0, "src": "h1", "dst": "h2", "proto": "tcp", "sport": 40000, "dport": 5201},
        {"job": "j", "flow_id": 1, "src": "h1", "dst": "h3", "proto": "tcp", "sport": 40002, "dport": 5201},
        {"job": "j", "flow_id": 2, "src": "h1", "dst": "h2", "proto": "tcp", "sport": "", "dport": ""},
    ]
    ips = {"h1": "10.0.1.1", "h2": "10.0.2.1", "h3": "10.0.2.2"}
    rows, summary = per_flow(counted, flows, ips.__getitem__)
    assert rows == [
        {"job": "j", "flow_id": 0, "node": "s1", "bytes": 600, "pkts": 4},
        {"job": "j", "flow_id": 0, "node": "s2", "bytes": 400, "pkts": 3},
    ]
    assert summary == {"nodes": ["s1", "s2"], "flows": 2, "flows_seen": 1, "unmatched_bytes": 50, "full": []}


def test_a_full_set_is_named() -> None:
    full = {("10.0.0.1", "10.0.0.2", "udp", i, 9): Counted(1, 1) for i in range(SET_SIZE)}
    _, summary = per_flow({"s1": full, "s2": {}}, [], str)
    assert summary["full"] == ["s1"]


def test_the_top_tier_is_the_spines_or_the_cores() -> None:
    spine_leaf = Topology(FabricSpec.from_dict({"topology": "spine-leaf", "spines": 2, "leaves": 2}))
    assert top_tier(spine_leaf) == ["s1", "s2"]
    fat_tree = Topology(FabricSpec.from_dict({"topology": "fat-tree", "k": 4}))
    assert top_tier(fat_tree) == sorted(n for n, node in fat_tree.nodes.items() if node.layer == "core")
    assert len(top_tier(fat_tree)) == 4
