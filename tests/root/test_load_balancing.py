"""Per-packet spraying (``ecmp.mode: spray``) against static ECMP for one TCP flow on a 2-spine fabric, as root:
spraying splits the flow's bytes evenly over both spines, static hashing keeps it on one."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.root.hoststate import run_one

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc)")]
SCENARIO = """\
name: spray-{mode}
description: one iperf3 flow over 2 spines, ecmp.mode {mode} (tests/root/test_load_balancing.py)
fabric:
  topology: spine-leaf
  spines: 2
  leaves: 2
  hosts_per_leaf: 1
  host_link: {{rate: 100Mbit, buffer: 300KB, mtu: 9000}}
  ecmp: {{mode: {mode}, seed: 1}}
workload:
  - {{kind: iperf, name: one, src: l1h1, dst: l2h1, duration: 3}}
duration: 20s
"""


def _record(tmp_path: Path, name: str, text: str) -> Path:
    """Run a scenario text with `testbed run`; its one record."""
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(text)
    return run_one(scenario, tmp_path / name)


def _run(tmp_path: Path, mode: str) -> tuple[dict[str, Any], dict[str, Any], str, Path]:
    run = _record(tmp_path, mode, SCENARIO.format(mode=mode))
    flows = (run / "flows.csv").read_text().splitlines()
    path = flows[1].split(",")[flows[0].split(",").index("path")]
    manifest, summary = (json.loads((run / f"{n}.json").read_text()) for n in ("manifest", "summary"))
    return manifest, summary, path, run


def _flow_spines(run: Path) -> tuple[int, dict[str, int]]:
    """The one flow's payload bytes (flows.csv) and its IP bytes per spine as the spines counted them."""
    with (run / "flows.csv").open() as f:
        (flow,) = csv.DictReader(f)
    with (run / "path_bytes.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {(r["job"], r["flow_id"]) for r in rows} == {(flow["job"], flow["flow_id"])}, rows
    return int(flow["bytes"]), {r["node"]: int(r["bytes"]) for r in rows}


def test_spray_splits_one_flow_over_both_spines(tmp_path: Path) -> None:
    manifest, summary, path, run = _run(tmp_path, "spray")
    assert manifest["load_balancing"] == {"mode": "spray", "pick": "round-robin", "ways": {"l1": 2, "l2": 2}}
    spines = summary["bytes_per_spine"]
    print(f"spray: bytes per spine {spines}, goodput {summary['goodput_bps'] / 1e6:.1f} Mbit/s, path {path}")
    assert set(spines) == {"s1", "s2"}
    assert abs(spines["s1"] - spines["s2"]) < 0.1 * max(spines.values()), spines  # within 10%
    assert path == "l1h1>l1>s1|s2>l2>l2h1"
    assert summary["goodput_bps"] > 0.9 * 100e6 * 8946 / 9014
    # path logging: the flow's own bytes, counted per spine, split within 10%
    sent, per_spine = _flow_spines(run)
    print(f"spray: the flow's {sent} B of payload, IP bytes per spine {per_spine}")
    assert set(per_spine) == {"s1", "s2"}
    assert abs(per_spine["s1"] - per_spine["s2"]) < 0.1 * max(per_spine.values()), per_spine
    assert sent <= sum(per_spine.values()) < 1.05 * sent  # headers are 0.8% of a 9000 B frame
    assert manifest["path_bytes"]["flows_seen"] == 1 and manifest["path_bytes"]["full"] == []
    # the same flow under static ECMP: one spine carries it (the other sees only the reverse path's ACKs at most)
    manifest, summary, path, run = _run(tmp_path, "static")
    assert manifest["load_balancing"]["mode"] == "static"
    spines = summary["bytes_per_spine"]
    print(f"static: bytes per spine {spines}, path {path}")
    assert min(spines.values()) < 0.05 * max(spines.values()), spines
    assert "|" not in path
    sent, per_spine = _flow_spines(run)
    print(f"static: the flow's {sent} B of payload, IP bytes per spine {per_spine}")
    assert list(per_spine) == [path.split(">")[2]], per_spine  # one spine: the predicted one
    assert sent <= per_spine[path.split(">")[2]] < 1.05 * sent


FLOWLET = """\
name: flowlet-{name}
description: packet trains 30 ms apart, ecmp.mode flowlet with gap {gap} (tests/root/test_load_balancing.py)
fabric:
  topology: spine-leaf
  spines: 2
  leaves: 2
  hosts_per_leaf: 2
  host_link: {{rate: 100Mbit, buffer: 300KB, mtu: 9000}}
  ecmp: {{mode: flowlet, gap: {gap}}}
workload:
  - {{kind: scapy_train, name: tr, src: l1h1, dst: l2h1, trains: 10, burst: 32, size: 1000, gap: 30ms, payload: udp}}
{more}duration: 20s
"""


SECOND = "  - {kind: scapy_train, name: t2, src: l1h2, dst: l2h2, trains: 10, burst: 32, size: 1000, gap: 30ms}\n"


def _flowlet_run(tmp_path: Path, name: str, gap: str, more: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    run = _record(tmp_path, name, FLOWLET.format(name=name, gap=gap, more=more))
    trains = (run / "trains.csv").read_text().splitlines()
    return json.loads((run / "manifest.json").read_text()), json.loads((run / "summary.json").read_text()), trains


def test_flowlets_switch_only_at_idle_gaps_longer_than_the_setting(tmp_path: Path) -> None:
    """10 UDP trains of one 5-tuple, 30 ms apart. With a 5 ms gap every train is a flowlet and round-robin moves it
    to the other spine. With a 200 ms gap the trains are one flowlet; a second host of the leaf sends the same, and
    the leaf's shared turn puts the two on different spines. Neither reorders a train."""
    for name, gap, flowlets, spread in (("short", "5ms", 10, True), ("long", "200ms", 2, False)):
        manifest, summary, trains = _flowlet_run(tmp_path, name, gap, "" if spread else SECOND)
        gap_ns = {"5ms": 5e6, "200ms": 200e6}[gap]
        lb = manifest["load_balancing"]
        assert lb["mode"] == "flowlet" and lb["gap_s"] == gap_ns / 1e9 and lb["ways"] == {"l1": 2, "l2": 2}
        c = manifest["flowlets"]["l1"]  # the senders' leaf, where the trains arrive
        spines = summary["bytes_per_spine"]
        print(f"gap {gap}: leaf l1 {c}; bytes per spine {spines}")
        # short: one flow, a flowlet per train, each on the other way; long: one flowlet per host's flow
        assert c["flowlets"] == flowlets and c["switches"] == (flowlets - 1 if spread else 0), c
        assert c["packets"] == 10 * 32 * (1 if spread else 2)
        assert c["max_gap_kept_ns"] < gap_ns, c  # every idle spell a flow kept its way over was shorter than gap
        if spread:
            assert c["min_gap_new_ns"] > gap_ns, c  # and every one it moved after was longer
        else:
            assert c["max_gap_kept_ns"] > 20e6, c  # the 30 ms between trains, kept
        # both ways: 5 trains per spine from alternating flowlets, or one host's 10 each
        assert abs(spines["s1"] - spines["s2"]) < 0.1 * max(spines.values()), spines
        header = trains[0].split(",")
        rows = [dict(zip(header, ln.split(","), strict=True)) for ln in trains[1:]]
        assert len(rows) == (10 if spread else 20) and all(
            r["out_of_order"] == "0" and r["received"] == "32" for r in rows
        ), rows


ADAPTIVE = """\
name: adaptive-{name}
description: trains 30 ms apart beside a bulk flow that fills one uplink, ecmp.mode {mode} (tests/root/test_load_balancing.py)
fabric:
  topology: spine-leaf
  spines: 2
  leaves: 2
  hosts_per_leaf: 2
  host_link: {{rate: 100Mbit, buffer: 300KB, mtu: 9000}}
  fabric_link: {{rate: 50Mbit}}
  ecmp: {{mode: {mode}, gap: 20ms}}
workload:
  - {{kind: iperf, name: bulk, src: l1h2, dst: l2h2, duration: 4}}
  - {{kind: scapy_train, name: tr, src: l1h1, dst: l2h1, trains: 10, burst: 32, size: 1000, gap: 30ms, payload: udp,
     start_after: 1s}}
duration: 20s
"""
TRAIN_WIRE_BYTES = 10 * 32 * (1000 + 14)


def test_adaptive_routing_avoids_the_uplink_a_bulk_flow_holds_full(tmp_path: Path) -> None:
    """A bulk TCP flow from l1h2 fills one of l1's two 50 Mbit/s uplinks; 10 UDP trains from l1h1 follow, each a
    new flowlet (30 ms apart, gap 20 ms). Adaptive routing sends every train up the other uplink, whose queue is
    empty; round-robin flowlets send half of them into the full one."""
    quiet = {}
    for mode in ("adaptive", "flowlet"):
        run = _record(tmp_path, mode, ADAPTIVE.format(name=mode, mode=mode))
        manifest = json.loads((run / "manifest.json").read_text())
        links = json.loads((run / "summary.json").read_text())["links"]
        up = {s: links[f"l1:l1-{s}"]["tx_bytes"] for s in ("s1", "s2")}
        quiet[mode] = min(up.values())
        print(f"{mode}: l1's uplinks sent {up}; the trains' {TRAIN_WIRE_BYTES} bytes, {manifest['flowlets']['l1']}")
        assert manifest["load_balancing"]["pick"] == ("least-queued" if mode == "adaptive" else "round-robin")
        assert max(up.values()) > 10e6  # the bulk flow stayed on one uplink
    assert abs(quiet["adaptive"] / TRAIN_WIRE_BYTES - 1) < 0.1, quiet  # every train took the quiet uplink
    assert quiet["flowlet"] < 0.7 * TRAIN_WIRE_BYTES, quiet  # round-robin: about half of them
