"""testbed.host.structops: struct_ops maps found by the name they register (bpftool's dump, as printed here)."""

from __future__ import annotations

from testbed.host.structops import ids_by_name

# `bpftool -j struct_ops dump` on this machine with one BPF DCTCP registered (trimmed to the fields read)
DUMP = [
    {"bpf_map_info": {"type": 26, "id": 1313, "name": "tbd_dctcp"}},
    {"bpf_struct_ops_tcp_congestion_ops": {"common": {}, "data": {"name": "dctcp_tbd3", "flags": 0}}},
    {"bpf_map_info": {"type": 26, "id": 1400, "name": "tbd_dctcp"}},
    {"bpf_struct_ops_tcp_congestion_ops": {"common": {}, "data": {"name": "dctcp_tb12ab"}}},
]


def test_names_map_to_their_ids() -> None:
    assert ids_by_name(DUMP) == {"dctcp_tbd3": [1313], "dctcp_tb12ab": [1400]}


def test_an_entry_without_its_map_info_or_name_is_skipped() -> None:
    assert ids_by_name(DUMP[1:2]) == {}
    assert ids_by_name([DUMP[0], {"bpf_struct_ops_tcp_congestion_ops": {"data": {}}}]) == {}
    assert ids_by_name([]) == {}
