"""An 8-rank ring all-reduce swept from 8 KiB to 16 MiB, as `all_reduce_perf -b 8K -e 16M -f 2` sweeps it: the
record's nccl-tests table (nccl_tests.txt and the summary) and `testbed report`'s, as root."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from tests.root.hoststate import run_one

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc)")]
REPO = Path(__file__).resolve().parents[2]
SWEEP = """\
name: nccl-sweep
description: an 8-rank ring all-reduce swept like all_reduce_perf -b 8K -e 16M -f 2 (tests/root/test_nccl_sweep.py)
fabric:
  topology: spine-leaf
  spines: 2
  leaves: 4
  hosts_per_leaf: 2
  host_link: {rate: 100Mbit, buffer: 300KB, mtu: 9000}
  ecmp: {hash: l4, seed: 1}
workload:
  - {kind: allreduce, name: sweep, algorithm: ring, ranks: all, sizes: {min: 8KiB, max: 16MiB, factor: 2},
     iterations: 2, warmup: 1}
duration: 90s
telemetry: {queue_hz: 100}
"""


def test_ring_sweep_table(tmp_path: Path) -> None:
    scenario = tmp_path / "sweep.yaml"
    scenario.write_text(SWEEP)
    run = run_one(scenario, tmp_path / "runs")
    table = json.loads((run / "summary.json").read_text())["nccl_tests"]["sweep"]
    rows = table["rows"]
    assert [r["size"] for r in rows] == [8192 << i for i in range(12)]
    assert all(r["iterations"] == 2 for r in rows)
    for r in rows:  # nccl-tests' all-reduce factor, 2(n-1)/n with n = 8
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * 7 / 8, rel=1e-12)
    # the printed lines say the same, to their printed precision
    printed = [ln.split() for ln in (run / "nccl_tests.txt").read_text().splitlines() if not ln.startswith("#")]
    assert len(printed) == 12
    for line in printed:  # each rounded as printed (3 significant digits, or 2 decimals from 1): within both
        algbw, busbw = float(line[6]), float(line[7])
        assert abs(busbw - algbw * 1.75) <= 1.75 * _half_ulp(algbw) + _half_ulp(busbw), line
    # small messages pay latency: each of the 14 ring steps of a 1 KiB chunk (85 us on the wire) waits a hop's
    # delay and a wake-up, so 8 KiB's busbw is a fraction of 16 MiB's, which comes near the link's (0.21-0.22 in 3
    # runs here). Sizes whose chunk is near the HTB burst can run faster than the links (see README, Known
    # limits): those rows say so, and only those.
    small, large = rows[0]["busbw_GBps"], rows[-1]["busbw_GBps"]
    print(f"busbw 8 KiB {small * 8e3:.1f} Mbit/s, 16 MiB {large * 8e3:.1f} Mbit/s")
    assert small < 0.5 * large, (small, large)
    assert large * 8e9 > 0.8 * 100e6 * 8946 / 9014, large  # busbw near the payload rate
    for r in rows:
        assert r["faster_than_links"] == (r["time_us"] < r["ideal_us"] - 1), r
    assert not rows[0]["faster_than_links"] and not rows[-1]["faster_than_links"]
    # `testbed report` prints the table and writes it beside the comparison
    out = tmp_path / "report"
    rp = subprocess.run(
        ["/usr/bin/python3", "-m", "testbed", "report", str(run), "-o", str(out), "--no-plots"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rp.returncode == 0, rp.stdout[-2000:] + rp.stderr[-2000:]
    assert "# Avg bus bandwidth    :" in rp.stdout
    assert (out / "nccl_tests.txt").read_text().count("\n# Avg bus bandwidth") == 1


def _half_ulp(printed: float) -> float:
    """Half the last printed digit of a bandwidth as nccl_tests.txt prints it (results.nccl_tests._bw)."""
    if printed >= 0.995:
        return 0.005
    return 0.5 * 10 ** (math.floor(math.log10(printed)) - 2)
