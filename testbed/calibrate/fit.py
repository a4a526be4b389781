"""The fit (pure): ``core_s = a x crossings + b x bytes`` for forwarding over the traffic windows
(``testbed.plan.CostModel``; the senders' and receivers' TCP work is folded into a and b), and the sampler's
own CPU over its ticks, its namespaces and the rows it wrote; each coefficient kept >= 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from testbed.calibrate.record import Calibration, CalibrationError, ForwardingSample, Machine, SamplerSample


def _lstsq(rows: Sequence[Sequence[float]], rhs: Sequence[float], weights: Sequence[float]) -> list[float]:
    """Weighted least squares through the origin, each coefficient kept >= 0 (a negative one is dropped and the rest
    refitted: the costs are physical, and noise must not make one negative)."""
    import numpy as np

    a = np.array(rows, dtype=float)
    y = np.array(rhs, dtype=float)
    w = np.sqrt(np.array(weights, dtype=float))
    keep = list(range(a.shape[1]))
    while keep:
        coef, *_ = np.linalg.lstsq(a[:, keep] * w[:, None], y * w, rcond=None)
        if (coef >= 0).all():
            out = [0.0] * a.shape[1]
            for i, c in zip(keep, coef):
                out[i] = float(c)
            return out
        keep.pop(int(np.argmin(coef)))
    return [0.0] * a.shape[1]


def fit_forwarding(samples: Iterable[ForwardingSample]) -> tuple[float, float]:
    """(core-seconds per crossing, per byte crossed) from traffic windows, each weighted by 1/cost² (relative
    error: a cheap window counts as much as an expensive one)."""
    s = [x for x in samples if x.crossings > 0 and x.forwarding_core_s > 0]
    if not s:
        raise CalibrationError("no traffic window with forwarding CPU to fit")
    a, b = _lstsq(
        [(x.crossings, x.bytes) for x in s],
        [x.forwarding_core_s for x in s],
        [1 / x.forwarding_core_s**2 for x in s],
    )
    return a, b


def fit_sampler(samples: Iterable[SamplerSample]) -> tuple[float, float, float]:
    """(core-seconds per tick, per namespace per tick, per row) from sampler lifetimes, relative error."""
    s = [x for x in samples if x.cpu_s > 0 and x.ticks > 0]
    if not s:
        raise CalibrationError("no sampler window to fit")
    tick, ns, row = _lstsq(
        [(x.ticks, x.ticks * x.namespaces, x.rows) for x in s], [x.cpu_s for x in s], [1 / x.cpu_s**2 for x in s]
    )
    return tick, ns, row


def calibration_from(
    forwarding: Sequence[ForwardingSample],
    sampler: Sequence[SamplerSample],
    machine: Machine,
    date: str,
    revision: str,
    duration_s: float = 0.0,
    idle_cores: float = 0.0,
    notes: Sequence[str] = (),
) -> Calibration:
    """Fit both models and wrap them with the facts of the measurement."""
    a, b = fit_forwarding(forwarding)
    tick, ns, row = fit_sampler(sampler)
    return Calibration(
        machine,
        date,
        revision,
        a,
        b,
        tick,
        ns,
        row,
        duration_s,
        idle_cores,
        tuple(forwarding),
        tuple(sampler),
        tuple(notes),
    )
