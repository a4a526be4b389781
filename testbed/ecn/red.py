"""Translate a switch-style marking setting into Linux sch_red parameters (the `kernel` implementation).

How close it is (documented here and carried in the run record through ``red_params(...)["fidelity"]``):
- RED compares an EWMA of the backlog, not the instantaneous backlog. tc's smallest weight is W = 1/2 (Wlog 1,
  chosen here through the smallest ``burst`` that yields it), so the average is (old + now) / 2 on every enqueue:
  on a queue growing one packet per arrival it trails the instantaneous queue by about one packet (avpkt bytes).
  While the port is idle RED decays the average by elapsed time using ``bandwidth`` (set to the link rate).
- step K becomes min = K, max = K + 1 byte, probability ~1: every ECT packet arriving with average >= K is marked.
- ramp: RED spaces its probabilistic marks by a packet count (Linux red_mark_probability): with configured
  probability p_b the gap between marks is uniform on 1..1/p_b, so the mark rate is 2 p_b / (1 + p_b). We set
  p_b = Pmax / (2 - Pmax) so the rate at Kmax is Pmax; in between it is 2 x p_b / (1 + x p_b), x in 0..1 (close to
  linear while Pmax is small, e.g. Pmax 0.1: 0.0526 at x = 1 -> rate 0.100, at x = 0.5 -> rate 0.051 vs 0.050).
  Above Kmax every ECT packet is marked (RED's hard mark).
- ``ecn nodrop``: packets that cannot be marked (not ECT) are queued, not dropped, as on a switch; the byte
  ``limit`` (the buffer) drops above it. Needs Linux >= 5.8 and iproute2 >= 5.8 (Debian 12, Ubuntu 22.04+).
"""

from __future__ import annotations

import math
from typing import Any

from testbed.spec.link import ETH_HEADER, LinkSpec, Marking

P_CEILING = 0.999  # tc converts probability * 2^32 to u32; 1.0 would overflow it


def ewma_wlog(qmin: int, burst: int, avpkt: int) -> int:
    """Wlog as tc computes it from min, burst, avpkt (iproute2 tc_red_eval_ewma); -1 when it has none."""
    a = burst + 1 - qmin / avpkt
    if a < 1.0:
        return -1
    w = 0.5
    for wlog in range(1, 32):
        if a <= (1 - (1 - w) ** burst) / w:
            return wlog
        w /= 2
    return -1


def smallest_weight_burst(qmin: int, avpkt: int) -> tuple[int, int]:
    """(burst, Wlog): the burst that gives tc's largest EWMA weight (smallest Wlog), smallest such burst."""
    start = max(1, math.ceil(qmin / avpkt))
    best: tuple[int, int] | None = None
    for burst in range(start, start + 64):
        wlog = ewma_wlog(qmin, burst, avpkt)
        if wlog > 0 and (best is None or wlog < best[1]):
            best = (burst, wlog)
            if wlog == 1:
                break
    if best is None:
        raise ValueError(f"no RED burst gives an EWMA weight for min={qmin} avpkt={avpkt}")
    return best


def red_params(marking: Marking, link: LinkSpec) -> dict[str, Any]:
    """sch_red parameters that make RED act as close to the instantaneous setting as tc allows (see module doc)."""
    if marking.mode == "off":
        raise ValueError("marking is off: no RED parameters (the leaf is a plain fifo)")
    low, high = marking.thresholds_bytes(link.mtu)
    avpkt = link.mtu + ETH_HEADER
    if marking.mode == "step":
        qmin, qmax, prob = low, low + 1, P_CEILING
        fidelity = (
            f"RED average (W=1/2) >= {qmin} B marks every ECT packet; trails the instantaneous queue by ~1 packet "
            f"({avpkt} B) while it grows"
        )
    else:
        pmax = float(marking.pmax or 0.0)
        qmin, qmax = low, max(high, low + 1)
        prob = min(pmax / (2 - pmax), P_CEILING)
        fidelity = (
            f"RED average (W=1/2); count-spaced marks with p_b={prob:.4g} give a mark rate of {pmax:g} at Kmax, "
            f"2*x*p_b/(1+x*p_b) between; all ECT above Kmax"
        )
    if qmin < avpkt:  # tc finds no EWMA weight when min < avpkt; avpkt then only shapes the idle decay
        avpkt = max(1, qmin)
        fidelity += f"; avpkt lowered to {avpkt} B (tc needs min >= avpkt)"
    burst, wlog = smallest_weight_burst(qmin, avpkt)
    return {
        "limit": link.buffer_bytes,
        "min": qmin,
        "max": qmax,
        "avpkt": avpkt,
        "burst": burst,
        "probability": round(prob, 6),
        "bandwidth_bps": link.rate_bps,
        "ecn": True,
        "nodrop": True,
        "harddrop": False,
        "wlog": wlog,
        "ewma_weight": 2.0**-wlog,
        "fidelity": fidelity,
    }


def red_args(params: dict[str, Any]) -> list[str]:
    """tc arguments for the leaf: ``red limit ... ecn nodrop``."""
    args = ["red"]
    for key in ("limit", "min", "max", "avpkt", "burst"):
        args += [key, str(params[key])]
    args += ["probability", f"{params['probability']:g}", "bandwidth", f"{params['bandwidth_bps']}bit"]
    if params["ecn"]:
        args.append("ecn")
    if params["nodrop"]:
        args.append("nodrop")
    if params["harddrop"]:
        args.append("harddrop")
    return args
