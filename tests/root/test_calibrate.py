"""`testbed calibrate` on a real fabric, shortened: one rate per MTU, short windows (about 20 s).

It checks what the measurement must get right whatever the machine's speed: the ring crosses 3 veths per packet,
every window saw traffic and the sampler's rows, the fitted costs are positive and of a physical size, and the
result survives the cache. The cache is written under tmp_path, never over this machine's calibration.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (builds namespaces)")]


def test_short_calibration_measures_and_caches(tmp_path: Path) -> None:
    from testbed.calibrate import cache as cal_cache
    from testbed.calibrate import cli as cal_cli
    from testbed.calibrate import model as cal_model
    from testbed.calibrate import record as cal_record
    from testbed.calibrate import trials as cal_trials

    lines: list[str] = []
    cal = cal_trials.measure(
        plan=((9000, (50e6,)), (1500, (8e6,))), window_s=1.5, idle_s=1.0, lock_wait=1800, log=lines.append
    )
    assert len(cal.forwarding) == 2 and len(cal.sampler) == 4, lines
    for s in cal.forwarding:
        assert s.crossings > 0 and s.forwarding_core_s > 0, s
        assert 2.8 <= s.veths_per_packet <= 3.2, s  # half the ring under one leaf (2 veths), half across (4)
        assert s.sampler_core_s > 0, s
    assert {s.traffic for s in cal.sampler} == {True, False}
    assert all(s.cpu_s > 0 and s.ticks > 0 for s in cal.sampler)
    # a packet's trip through one veth costs between a microsecond and a tenth of a millisecond on any machine
    assert 1e-6 <= cal.model.crossing_cost(9014) <= 1e-4, cal_cli.format_calibration(cal)
    assert cal.sampler_per_netns_s > 0 and cal.sampler_per_row_s >= 0
    assert cal.matches(cal_record.Machine.here()) and cal.revision

    path = tmp_path / "calibration.json"
    cal_cache.save(cal, path)
    assert cal_cache.load_matching(path) == cal
    assert cal_cache.status(path)["status"] == "calibrated"
    assert isinstance(cal.model, cal_model.CostModel) and cal.model.calibrated
