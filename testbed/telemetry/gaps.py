"""Sampling-interval statistics: achieved rate and jitter (stddev/mean of the gap between samples)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class GapStats:
    """Running mean/stddev (Welford) of the gap between consecutive samples, plus a 50 us histogram to 100 ms."""

    last: float = -1.0
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    max: float = 0.0
    hist: list[int] = field(default_factory=lambda: [0] * 2001)

    def add(self, t: float) -> None:
        if self.last >= 0:
            g = t - self.last
            self.n += 1
            d = g - self.mean
            self.mean += d / self.n
            self.m2 += d * (g - self.mean)
            if g > self.max:
                self.max = g
            self.hist[min(int(g * 20000), 2000)] += 1
        self.last = t

    def quantile_ms(self, q: float) -> float:
        """Upper edge of the histogram bin holding quantile ``q`` of the gaps, in ms."""
        target, acc = q * self.n, 0
        for i, c in enumerate(self.hist):
            acc += c
            if acc >= target and c:
                return round((i + 1) * 0.05, 2)
        return 0.0

    def summary(self) -> dict[str, float]:
        std = math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0
        return {
            "samples": self.n + (1 if self.last >= 0 else 0),
            "rate_hz": round(1 / self.mean, 1) if self.mean else 0.0,
            "gap_mean_ms": round(self.mean * 1e3, 4),
            "gap_std_ms": round(std * 1e3, 4),
            "jitter": round(std / self.mean, 4) if self.mean else 0.0,
            "gap_p50_ms": self.quantile_ms(0.5),
            "gap_p99_ms": self.quantile_ms(0.99),
            "gap_p999_ms": self.quantile_ms(0.999),
            "gap_max_ms": round(self.max * 1e3, 3),
        }
