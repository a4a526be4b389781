"""The CPU cost model's prediction: what flows and the queue sampler cost per second under its coefficients
(``testbed.calibrate.model.CostModel``; ``FALLBACK`` there without a calibration).

Forwarding: a TCP flow sends rate / (8 x (MTU + 14)) data packets per second plus one ACK per two, and every
packet costs the CPU once per veth it crosses, with a fixed part and a per-byte part. The senders' and receivers'
own TCP work is inside those two coefficients, because they are fitted to whole flows (a ring of 3 veths per
packet on average: flows under one leaf cost a little more than the model says, flows across a spine a little
less).

Queue telemetry (the harness's own largest cost, not forwarding). The poller: per tick of ``telemetry.queue_hz`` a fixed part
plus one netlink dump per namespace, plus a cost per row written. A queue gets a row in a tick when its counters
moved (a packet left it since the last tick: probability 1 - exp(-pps / hz)), else every keyframe (0.1 s);
links.csv likewise at ``link_hz``, per interface. The traffic processes' own user time (Python workers, iperf3's)
is not modelled. The kernel telemetry (``bpf_queues``): a cost per packet per queue passed (QTELEM_PER_CROSSING_S).

The coefficients come from ``testbed calibrate``, cached per machine: ``testbed.calibrate.cache.current_model``.
"""

from __future__ import annotations

import math

from testbed.calibrate.model import CostModel
from testbed.plan.flows import FlowPath
from testbed.spec.link import ETH_HEADER

ACK_FRAME = 66  # Ethernet + IPv4 + TCP with timestamps, no payload
ACKS_PER_DATA = 0.5  # delayed ACKs: one per two segments (GRO is off on every port)
KEYFRAME_S = 0.1  # the sampler writes an unchanged queue or link this often (SamplerConfig.keyframe_s)
# The kernel queue telemetry (telemetry.bpf_queues): core-seconds per packet per queue it passes (its enqueue and
# dequeue programs, the dequeues of nothing between, and the reader's share of the slot it closes), from
# bench.qtelem_cost's runs on the default fabric (docs/bench.md)
QTELEM_PER_CROSSING_S = 1.5e-6


def packets(rate_bps: float, mtu: int) -> tuple[float, float]:
    """(data, ACK) packets per second of a TCP flow at ``rate_bps`` of Ethernet frames."""
    data = rate_bps / (8 * (mtu + ETH_HEADER))
    return data, data * ACKS_PER_DATA


def forwarding_core_s(paths: list[FlowPath], link_bps: float, mtu: int, model: CostModel) -> float:
    """Core-seconds per second the kernel spends moving these flows through their veths."""
    total = 0.0
    for p in paths:
        data, acks = packets(p.rate(link_bps), mtu)
        total += p.veths * (data * model.crossing_cost(mtu + ETH_HEADER) + acks * model.crossing_cost(ACK_FRAME))
    return total


def _changed(pps: float, hz: float) -> float:
    """Probability that at least one packet passed between two ticks of ``hz`` (Poisson arrivals)."""
    return 1.0 - math.exp(-pps / hz) if hz > 0 else 0.0


def sampler_rows_per_s(
    paths: list[FlowPath], link_bps: float, mtu: int, ports: int, queue_hz: float, link_hz: float
) -> float:
    """Rows per second the queue sampler writes: a queue or link whose counters moved since the last tick, else a
    keyframe. Flows sharing a port are counted apart (an upper bound), capped at one row per port per tick."""
    queues = links = 0.0
    for p in paths:
        data, acks = packets(p.rate(link_bps), mtu)
        queues += p.veths * (_changed(data, queue_hz) + _changed(acks, queue_hz))
        links += 2 * p.veths * _changed(data + acks, link_hz)  # both ends of every veth count the packets
    keyframes = ports / KEYFRAME_S
    return min(ports * queue_hz, queues * queue_hz + keyframes) + min(ports * link_hz, links * link_hz + keyframes)


def qtelem_core_s(crossings_per_s: float) -> float:
    """Core-seconds per second of the kernel queue telemetry when ``crossings_per_s`` packets pass queues."""
    return crossings_per_s * QTELEM_PER_CROSSING_S


def sampler_core_s(namespaces: int, rows_per_s: float, queue_hz: float, model: CostModel) -> float:
    """Core-seconds per second of the queue sampler at ``queue_hz`` over ``namespaces``, writing ``rows_per_s``."""
    if queue_hz <= 0:
        return 0.0
    return queue_hz * (model.sampler_per_tick_s + namespaces * model.sampler_per_netns_s) + (
        rows_per_s * model.sampler_per_row_s
    )
