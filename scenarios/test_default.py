"""The default experiment (README's main command): ECN marking vs drop-tail under all-reduce plus incast.

Reproduces, at small scale, the result of DCTCP-style switch marking (Alizadeh et al., SIGCOMM 2010) and of
ECN under incast: marking at K keeps queues short, so short flows see fewer drops and a shorter completion-time
tail, while the all-reduce keeps its goodput (busbw).
"""

import pytest

pytestmark = [pytest.mark.root, pytest.mark.quick]


def test_ecn_cuts_drops_and_the_short_flow_tail(experiment):
    exp = experiment("default")
    off = exp.points[0]
    on = exp.points[1]
    exp.expect(off.variant["fabric.host_link.ecn"] in (False, "off"), f"first point should be drop-tail: {off.variant}")
    exp.expect(on["marks_total"] > 0, f"no CE marks with K=30KB (marks {on['marks_total']})")
    exp.expect(
        on["drops_total"] < 0.5 * off["drops_total"],
        f"drops with ECN {on['drops_total']:.0f} not below half of drop-tail's {off['drops_total']:.0f}",
    )
    exp.expect(
        on["fct_p99_s"] < 0.8 * off["fct_p99_s"],
        f"short-flow FCT p99 with ECN {on['fct_p99_s'] * 1e3:.1f} ms not below 0.8 x drop-tail's {off['fct_p99_s'] * 1e3:.1f} ms",
    )
    exp.expect(
        on["busbw_bps"] > 0.9 * off["busbw_bps"],
        f"all-reduce busbw with ECN {on['busbw_bps'] / 1e6:.1f} Mbit/s fell below 0.9 x drop-tail's {off['busbw_bps'] / 1e6:.1f}",
    )
