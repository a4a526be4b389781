"""The CPU budget: a scenario point's predicted load against it, the refusal of a point over it (``BudgetError``,
one line: the point, its load against the budget, and the highest host-link rate that fits), and what a run
records under ``preflight`` (``manifest_entry``).

The budget is ``CPU_BUDGET`` of the whole machine for the mean load (``TESTBED_CPU_BUDGET`` overrides it), and
``PEAK_LIMIT`` for the busiest interval. Without a calibration of this machine the built-in ``FALLBACK`` is used
and every message says the estimate is uncalibrated.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from testbed.calibrate.cache import current_model
from testbed.calibrate.model import CostModel
from testbed.errors import TestbedError
from testbed.plan.labels import point_label
from testbed.plan.load import Estimate, estimate, preflight
from testbed.spec.fabric import FabricSpec
from testbed.spec.topology import Topology

if TYPE_CHECKING:
    from testbed.host.capabilities import Capabilities

# Share of the machine a point may be predicted to use: the rest is headroom for what the model leaves out (the
# traffic workers' Python, bursts above the mean) and for a slower machine of the same kind.
CPU_BUDGET = 0.60
BUDGET_ENV = "TESTBED_CPU_BUDGET"
# The busiest interval of a workload may go above the budget (the mean is what the budget bounds) but not above
# this: both cores would be saturated (the fidelity guardrail counts a core >= 95% busy as saturated).
PEAK_LIMIT = 0.90
# Whether an uncalibrated estimate (the built-in constants) refuses a point too, or only warns. The constants are
# one machine's, and machines of the same kind differ by 2x; every shipped scenario fits them.
ENFORCE_UNCALIBRATED = True
log = logging.getLogger("testbed.preflight")  # the package's logger: the preflight's warnings, from any module


class BudgetError(TestbedError, RuntimeError):
    """A scenario point is predicted to need more CPU than the budget allows (refused before anything is built)."""


def cpu_budget(env: Mapping[str, str] | None = None) -> float:
    """The share of the machine a point may use: ``CPU_BUDGET``, or ``TESTBED_CPU_BUDGET`` (0.75 or 75%) of ``env``
    (the entry's environment: ``testbed.host.machine.Machine.env``; None: not set)."""
    raw = (env or {}).get(BUDGET_ENV, "").strip()
    if not raw:
        return CPU_BUDGET
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BudgetError(f"{BUDGET_ENV}={raw!r} is not a share of the machine (e.g. 0.75 or 75%)") from None
    if not 0 < value <= 1:
        raise BudgetError(f"{BUDGET_ENV}={raw!r} must be above 0 and at most 1 (100%)")
    return value


@dataclass(frozen=True)
class BudgetVerdict:
    """A point's predicted load against the budget, and the highest host-link rate that fits."""

    label: str
    estimate: Estimate
    budget: float
    rate_bps: float  # the point's host-link rate
    max_rate_bps: float | None  # highest host-link rate within the budget (None: none does)
    mtu9000_fits: bool  # jumbo frames alone would bring it within the budget (False at MTU 9000)
    model: CostModel

    @property
    def fits(self) -> bool:
        return within(self.estimate, self.budget)

    @property
    def enforced(self) -> bool:
        """Whether a point over the budget is refused (calibrated estimates; see ``ENFORCE_UNCALIBRATED``)."""
        return self.model.calibrated or ENFORCE_UNCALIBRATED

    def message(self) -> str:
        """One line: the point, its predicted load against the budget, and what would fit."""
        e = self.estimate
        head = (
            f"{self.label}: predicted CPU load {e.total:.0%} of {e.cores} cores (forwarding {e.load:.0%}, queue sampler "
            f"{e.sampler_load:.0%} at {e.queue_hz:g} Hz; busiest interval {e.peak:.0%})"
        )
        if e.total > self.budget:
            head += f" is over the budget of {self.budget:.0%}"
        else:
            head += f": its busiest interval is over {max(PEAK_LIMIT, self.budget):.0%} (both cores saturated)"
        if self.max_rate_bps is None:
            fix = (
                f"no host-link rate fits: the queue sampler alone needs {e.sampler_load:.0%}; lower telemetry.queue_hz"
            )
        else:
            fix = (
                f"the highest host-link rate that fits is {_fmt_rate(self.max_rate_bps)} "
                f"(now {_fmt_rate(self.rate_bps)}; fabric.scale divides every rate)"
            )
        if self.mtu9000_fits:
            fix += ", or host_link.mtu: 9000 fits as it is"
        how = "this machine's calibration" if self.model.calibrated else self.model.source
        if not self.enforced:
            how += ", not enforced"
        return f"{head}; {fix} ({how}; {BUDGET_ENV} overrides the budget)"


def within(e: Estimate, budget: float) -> bool:
    """The budget's test: the mean load at most ``budget`` and the busiest interval at most ``PEAK_LIMIT``."""
    return e.total <= budget and e.peak <= max(PEAK_LIMIT, budget)


def _fmt_rate(bps: float) -> str:
    if bps >= 1e9:
        return f"{bps / 1e9:.3g} Gbit/s"
    if bps >= 1e6:
        return f"{bps / 1e6:.3g} Mbit/s"
    return f"{bps / 1e3:.3g} kbit/s"


def _round_down(x: float, digits: int = 2) -> float:
    """``x`` rounded down to ``digits`` significant digits (so a rounded rate still fits)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return math.floor(x / scale + 1e-9) * scale


def max_host_rate(
    spec: FabricSpec,
    workload: Iterable[Any],
    caps: Capabilities | None,
    model: CostModel,
    telemetry: Any,
    budget: float,
    topo: Topology | None = None,
) -> float | None:
    """The highest host-link rate (bit/s, two significant digits, rounded down) at which the predicted load fits
    ``budget`` (and its busiest interval ``PEAK_LIMIT``); None when even an idle fabric does not (the sampler alone
    is over it).

    The load grows with the rate: linearly for every flow the host links limit, not at all for flows at their job's
    own cap, and the sampler's rows saturate; so the solve bisects on the monotone load."""
    jobs = list(workload)

    def fits(rate: float) -> bool:
        return within(estimate(spec, jobs, caps, model, telemetry, link_bps=rate, topo=topo), budget)

    lo, hi = 0.0, float(spec.host_link.rate_bps)
    if not fits(1.0):
        return None
    if fits(hi):
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return _round_down(lo)


def check_budget(
    point: Any,
    caps: Capabilities | None,
    model: CostModel | None = None,
    env: Mapping[str, str] | None = None,
    topo: Topology | None = None,
) -> BudgetVerdict:
    """A scenario point's predicted load (forwarding + queue sampler, with the telemetry it will run with) against
    the budget. ``model`` defaults to this machine's calibration (else ``FALLBACK``); ``topo``: the point's
    topology, drawn already."""
    from testbed.plan import guestfit

    model = current_model() if model is None else model
    budget = cpu_budget(env)
    telemetry, _ = guestfit.fit_telemetry(point.telemetry, env)
    spec = point.fabric
    topo = Topology(spec) if topo is None else topo
    e = estimate(spec, point.workload, caps, model, telemetry, topo=topo)
    max_rate = None
    mtu9000 = False
    if not within(e, budget):
        max_rate = max_host_rate(spec, point.workload, caps, model, telemetry, budget, topo)
        if spec.mtu < 9000:
            jumbo = replace(spec, host_link=replace(spec.host_link, mtu=9000))
            mtu9000 = within(estimate(jumbo, point.workload, caps, model, telemetry, topo=topo), budget)  # same graph
    return BudgetVerdict(point_label(point), e, budget, float(spec.host_link.rate_bps), max_rate, mtu9000, model)


def require_budget(
    point: Any,
    caps: Capabilities | None,
    model: CostModel | None = None,
    env: Mapping[str, str] | None = None,
    topo: Topology | None = None,
) -> BudgetVerdict:
    """``check_budget``, raising ``BudgetError`` (one line: ``BudgetVerdict.message``) when the point is over it;
    an uncalibrated estimate over it is logged as a warning instead (``ENFORCE_UNCALIBRATED``)."""
    verdict = check_budget(point, caps, model, env, topo)
    if not verdict.fits:
        if verdict.enforced:
            raise BudgetError(verdict.message())
        log.warning("warning: %s", verdict.message())
    return verdict


def manifest_entry(
    spec: FabricSpec,
    workload: Iterable[Any],
    caps: Capabilities | None = None,
    telemetry: Any = None,
    model: CostModel | None = None,
    env: Mapping[str, str] | None = None,
    topo: Topology | None = None,
) -> dict[str, Any]:
    """What a run records under ``preflight``: the warnings, the estimate (with the sampler when ``telemetry`` is
    given), the budget, whether the estimate fits it (None without ``telemetry``: not judged) and whether a point
    over it is refused, and the cost model used (calibrated, or the built-in constants)."""
    model = current_model() if model is None else model
    jobs = list(workload)
    if telemetry is not None:
        from testbed.plan import guestfit

        telemetry, _ = guestfit.fit_telemetry(telemetry, env)
    topo = Topology(spec) if topo is None else topo
    e = estimate(spec, jobs, caps, model, telemetry, topo=topo)
    try:
        budget: float | str = cpu_budget(env)
    except BudgetError as exc:
        budget = str(exc)
    return {
        "warnings": preflight(spec, jobs, caps, model, topo),
        "estimate": {**e.describe(), **({} if telemetry is not None else {"sampler": "not estimated (no telemetry)"})},
        "budget": budget,
        "fits": within(e, budget) if isinstance(budget, float) and telemetry is not None else None,
        "enforced": model.calibrated or ENFORCE_UNCALIBRATED,
        "model": model.describe(),
    }
