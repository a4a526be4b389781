"""An imported ASTRA-sim training step on a non-blocking and on a 3:1 fabric (scenarios/trace.yaml).

What a workload trace is replayed for: the same step, two fabrics, compared by its exposed communication
(iteration time - the step's compute alone, 0.24 s; summary ``exposed_comm_s``). At 3:1 the ring's cross-rack hops
get a third of the host rate, so the all-reduces the backward cannot hide take longer. Asserted: exposed
communication at 3:1 at least 1.3 x the non-blocking one. ``TESTBED_REVERSED=1``: 1:1 at both points, so it fails.
"""

import pytest
from scenario_helpers import REVERSED

pytestmark = [pytest.mark.root, pytest.mark.quick]

REVERSED_OVERRIDES = {"trace": {"sweep": {"fabric.oversubscription": ["1:1", "1:1"]}}}


def test_oversubscription_exposes_more_communication(judged):
    judged("trace", judge, REVERSED_OVERRIDES)


def judge(exp):
    if REVERSED:  # 1:1 at both points: the second in sweep order stands in for 3:1
        flat, over = exp.matching(oversubscription="1:1")
    else:
        flat, over = exp.where(oversubscription="1:1"), exp.where(oversubscription="3:1")
    e_flat, e_over = flat["exposed_comm_s"], over["exposed_comm_s"]
    print(f"\ntrace: exposed communication {e_flat:.3f} s at 1:1, {e_over:.3f} s at 3:1")
    exp.expect(
        e_over >= 1.3 * e_flat,
        f"exposed communication at 3:1 {e_over:.3f} s, not at least 1.3 x 1:1's {e_flat:.3f} s",
    )
