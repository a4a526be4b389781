"""What the guest kernel emulates faithfully under software emulation (TCG), and a run's fit to it (pure).

Inside ``testbed vm`` without KVM (``TESTBED_GUEST_ACCEL=tcg``) every instruction is translated, so the guest is
several times slower than this machine natively:

- a link's bottleneck delivers its rate only up to a frame rate: the limit is packets, not bits;
- the queue sampler competes with the emulation for the two vCPUs and falls short of high rates; whole-guest
  stalls leave gaps between its samples, longest while the guest starts or reaps iperf3 and the Python workers
  (in the first seconds of a run and as its flows end).

The runs that set the limits below are in docs/vm.md ("Fidelity under TCG").

So under TCG a run is refused before anything is built when a link's frame rate at its MTU exceeds
``TCG_MAX_LINK_PPS`` (the reason names the limit and the fix), the sampler's rates are capped at ``TCG_QUEUE_HZ`` /
``TCG_LINK_HZ``, and the sampler guardrail allows ``TCG_SAMPLER_GAP_S`` / ``TCG_SAMPLER_RATE_MIN`` (all recorded in
the manifest under ``guest_fit``); the bottleneck-rate and CPU guardrails are unchanged. Natively, or under KVM,
nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from testbed.host.capabilities import CapabilityError
from testbed.spec.fabric import FabricSpec
from testbed.spec.link import ETH_HEADER
from testbed.spec.topology import Topology

TCG_MAX_LINK_PPS = 700  # frames per second per link (50 Mbit/s at MTU 9000, 8.6 Mbit/s at MTU 1500)
TCG_QUEUE_HZ = 25.0  # at 50 Hz the sampler takes up to most of a vCPU and falls short on a slow host
TCG_LINK_HZ = 25.0
TCG_SAMPLER_GAP_S = 0.25  # above the whole-guest stalls as flows start (docs/vm.md)
TCG_SAMPLER_RATE_MIN = 0.85


def max_rate_bps(mtu: int) -> float:
    """The fastest link the TCG guest emulates faithfully at this MTU."""
    return float(TCG_MAX_LINK_PPS * 8 * (mtu + ETH_HEADER))


class GuestFitError(CapabilityError):
    """The scenario asks for more than the software-emulated guest reproduces faithfully."""


def under_tcg(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``env`` (the guest context the entry read: ``testbed.host.machine.Machine.env``, or a record's
    manifest ``guest``) is the software-emulated guest; None: no guest."""
    e = env or {}
    return e.get("TESTBED_GUEST") == "1" and e.get("TESTBED_GUEST_ACCEL") == "tcg"


def check_fabric(spec: FabricSpec, env: Mapping[str, str] | None = None, topo: Topology | None = None) -> None:
    """Refuse links faster than the TCG guest emulates faithfully (no-op natively and under KVM); ``topo``: the
    spec's, drawn already."""
    if not under_tcg(env):
        return
    fast = [
        p
        for p in (Topology(spec) if topo is None else topo).ports()
        if p.link.rate_bps > max_rate_bps(p.link.mtu) * 1.01
    ]
    if fast:
        p = max(fast, key=lambda p: p.link.rate_bps / max_rate_bps(p.link.mtu))
        cap = max_rate_bps(p.link.mtu)
        raise GuestFitError(
            f"link {p.name}: {p.link.rate_bps / 1e6:g} Mbit/s at MTU {p.link.mtu} is above the {cap / 1e6:.3g} Mbit/s "
            f"({TCG_MAX_LINK_PPS} frames/s) per link that the guest kernel emulates faithfully under software "
            "emulation (TCG: measured 0.65 of 200 Mbit/s delivered at MTU 9000, 0.74 of 50 Mbit/s at MTU 1500); "
            f"lower the rates, use jumbo frames, or add fabric.scale (factor >= {p.link.rate_bps / cap:.2g}), "
            "or run where KVM works"
        )


def fit_telemetry(telemetry: Any, env: Mapping[str, str] | None = None) -> tuple[Any, dict[str, Any] | None]:
    """``(telemetry, notes)``: sampler rates capped to what the TCG guest sustains; notes None when unchanged."""
    if not under_tcg(env):
        return telemetry, None
    queue_hz = min(float(telemetry.queue_hz), TCG_QUEUE_HZ)
    link_hz = min(float(telemetry.link_hz), TCG_LINK_HZ)
    if (queue_hz, link_hz) == (telemetry.queue_hz, telemetry.link_hz):
        return telemetry, None
    notes = {
        "accel": "tcg",
        "queue_hz": {"asked": telemetry.queue_hz, "used": queue_hz},
        "link_hz": {"asked": telemetry.link_hz, "used": link_hz},
        "sampler_gap_max_s": TCG_SAMPLER_GAP_S,
        "sampler_rate_min": TCG_SAMPLER_RATE_MIN,
        "why": "under TCG the queue sampler reaches 164 Hz of 200 at 90 % of a vCPU and 40-50 Hz of 50 at 30-65 % "
        "(measured); capped at "
        f"{TCG_QUEUE_HZ:g} Hz so that it leaves the emulation a core; guest stalls of up to {TCG_SAMPLER_GAP_S:g} s are allowed",
    }
    return replace(telemetry, queue_hz=queue_hz, link_hz=link_hz), notes
