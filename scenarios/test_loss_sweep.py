"""The cost of random loss on goodput and all-reduce time, from 0.001% to 1% per link (docs/loss.md).

Measures what the seeds claim (0.01% loss costs about 10% of effective bandwidth) rather than asserting it: that
figure is RDMA's go-back-N, which resends everything after a lost packet. Kernel TCP with SACK at sub-millisecond
RTTs repairs a loss in about an RTT, so here the cost appears only near 1% per link. The test asserts the
qualitative result a noisy machine keeps: rare loss costs nothing measurable, 1% per link costs goodput and
all-reduce time. The table of every point goes to the report and docs/loss.md.

``TESTBED_REVERSED=1`` runs every point lossless.
"""

from __future__ import annotations

import pytest
from scenario_helpers import REVERSED

pytestmark = [pytest.mark.root]

LOSSES = [0.0, 0.00001, 0.0001, 0.001, 0.01]
REVERSED_OVERRIDES = {"loss_sweep": {"sweep": {"fabric.host_link.loss": [0.0] * len(LOSSES)}}}


@pytest.mark.full
def test_loss_costs_goodput_and_allreduce_time_only_when_frequent(judged):
    judged("loss_sweep", judge_loss, REVERSED_OVERRIDES)


def judge_loss(exp):
    points = exp.points if REVERSED else [exp.where(loss=x) for x in LOSSES]
    base = points[0]
    g0, c0 = base["goodput_per_job_bps"]["bulk"], base["coll_iter_p50_s"]
    print("loss/link  path   goodput Mbit/s (x lossless)   all-reduce p50 s (x lossless)   retrans  timeouts")
    rows = []
    for loss, p in zip(LOSSES, points, strict=True):
        g, c = p["goodput_per_job_bps"]["bulk"], p["coll_iter_p50_s"]
        rows.append((loss, g / g0, c / c0))
        print(
            f"{loss:9.5%}  {1 - (1 - loss) ** 4:6.3%}  {g / 1e6:6.1f} ({g / g0:.3f})  {c:.3f} ({c / c0:.3f})  "
            f"{p['retrans_total']:.0f}  {p['timeouts_total']:.0f}"
        )
    rare, frequent = rows[1], rows[-1]
    exp.expect(
        rare[1] > 0.98 and rare[2] < 1.02,
        f"0.001% loss per link cost goodput x{rare[1]:.3f} and all-reduce time x{rare[2]:.3f}; expected within 2%",
    )
    exp.expect(frequent[1] < 0.9, f"1% loss per link kept goodput at x{frequent[1]:.3f} of lossless; expected < 0.9")
    exp.expect(frequent[2] > 1.2, f"1% loss per link made the all-reduce x{frequent[2]:.3f}; expected > 1.2")
