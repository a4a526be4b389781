"""BPF struct_ops maps found by the name of what they register (a tcp_congestion_ops' ``name``), for cleanup.

A run writes the congestion-control name it is about to register (``dctcp_<prefix>``) into its state file before
registering it, since the map's id exists only afterwards; ``testbed clean`` then finds the map by that name in
``bpftool struct_ops dump`` and unregisters it, so a run killed between the two steps leaves nothing behind.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any


def ids_by_name(dump: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Pure: registered name -> struct_ops map ids, from ``bpftool -j struct_ops dump`` (a list in which each map's
    ``bpf_map_info`` is followed by its ``bpf_struct_ops_<kind>`` entry, whose ``data.name`` is the name)."""
    out: dict[str, list[int]] = {}
    last_id: int | None = None
    for entry in dump:
        if "bpf_map_info" in entry:
            last_id = int(entry["bpf_map_info"]["id"])
            continue
        for key, value in entry.items():
            name = (value.get("data") or {}).get("name") if key.startswith("bpf_struct_ops_") else None
            if name and last_id is not None:
                out.setdefault(str(name), []).append(last_id)
        last_id = None
    return out


def registered() -> dict[str, list[int]]:
    """``ids_by_name`` of this machine (empty where bpftool is missing or shows nothing)."""
    try:
        cp = subprocess.run(["bpftool", "-j", "struct_ops", "dump"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if cp.returncode != 0 or not cp.stdout.strip():
        return {}
    try:
        return ids_by_name(json.loads(cp.stdout))
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}
