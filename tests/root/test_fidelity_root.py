"""Fidelity guardrails on real samples: an 8-flow ring on a 2x4x2 fabric with the telemetry sampler running.

MTU 1500 at 100 Mbit/s per link is CPU-bound on 2 cores (docs/bench.md) and must be marked not
faithful; MTU 9000 at 50 Mbit/s must pass. Holds the bench lock (it measures throughput).
"""

from __future__ import annotations

import os

import pytest

from results.fidelity import format_verdict

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (builds namespaces)")]


def _run(rate_mbit: float, mtu: int, out):
    from bench.main import bench_lock
    from bench.ring import ring_trial
    from results.fidelity import evaluate
    from results.tables import read_table
    from testbed.calibrate.rig import fabric_spec_dict
    from testbed.fabric.build import Fabric
    from testbed.spec.fabric import FabricSpec
    from testbed.spec.schemas import TEXT
    from testbed.telemetry import PortRef, start_sampler

    spec = FabricSpec.from_dict(fabric_spec_dict(rate_mbit * 1e6, mtu))
    with bench_lock(600), Fabric(spec, lock_wait=1800) as fab:
        refs = [PortRef(fab.netns(p.node), p.dev, node=p.node) for p in fab.ports()]
        ports = [{"node": p.node, "dev": p.dev, "rate_bps": p.link.rate_bps, "mtu": p.link.mtu} for p in fab.ports()]
        handle = start_sampler(fab.procs, refs, out, rate_hz=1000)
        try:
            hosts = [(n, h.ip) for n, h in fab.hosts.items()]
            res = ring_trial(
                lambda h, argv, o: fab.procs.spawn(f"iperf3-{h}", argv, netns=fab.netns(h), stdout=o),
                hosts,
                rate_mbit * 1e6,
                mtu,
                seconds=3.0,
            )
        finally:
            health = handle.stop()
    v = evaluate(*(read_table(out / f"{name}.csv", TEXT[name]) for name in ("queues", "links", "cpu")), ports, health)
    return res, v


def test_overloaded_ring_is_not_faithful(tmp_path):
    res, v = _run(100, 1500, tmp_path)
    checks = {c["name"]: c for c in v["checks"]}
    assert res.worst < 0.95, f"expected a CPU-bound ring, got worst flow {res.worst:.2f}"
    assert v["faithful"] is False, format_verdict(v)
    assert checks["bottleneck_rate"]["ok"] is False or checks["cpu_saturation"]["ok"] is False


def test_jumbo_ring_at_half_rate_is_faithful(tmp_path):
    res, v = _run(50, 9000, tmp_path)
    assert res.faithful, res
    assert v["faithful"] is True, format_verdict(v)
