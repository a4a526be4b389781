"""Each variant against the baseline (the comparison's first complete row) on the headline metrics: the claims
(results.claims) and their table, one line per variant and metric, in text, Markdown and CSV.

The runs of a row are paired with the baseline's by ``repeat_index`` (the same flow placement); see results.claims
for the interval used when they cannot be.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results.claims import (
    HIGHER,
    LOWER,
    MAX_REPEATS,
    MIN_REPEATS_UNKNOWN_SPREAD,
    NO_DIFFERENCE,
    NO_WINNER,
    PAIRED,
    RESAMPLES,
    SEED,
    Claim,
    Value,
    compare_values,
    holm,
    no_winner,
    wording,
)
from results.compare import Comparison, Row, fmt


@dataclass(frozen=True)
class Headline:
    """A headline metric: summary keys to try in turn (the first that both rows have) with their names."""

    options: tuple[tuple[str, str], ...]  # (summary key, what it is called in a sentence)
    unit: str  # display unit (results.compare's scales)
    lower_better: bool


HEADLINES: tuple[Headline, ...] = (
    # coll p99 needs enough iterations to be computed; p50, then the mean iteration time, stand in
    Headline(
        (
            ("coll_iter_p99_s", "collective iteration p99"),
            ("coll_iter_p50_s", "collective iteration p50"),
            ("coll_iter_mean_s", "mean collective iteration time"),
        ),
        "ms",
        True,
    ),
    Headline((("fct_p99_s", "FCT p99"),), "ms", True),
    Headline((("rtt_p99_s", "RTT p99 under load"),), "ms", True),
    Headline((("goodput_bps", "aggregate goodput"),), "Mb/s", False),
    Headline((("drops_total", "drops"),), "n", True),
)


@dataclass(frozen=True)
class Versus:
    """One claim of a row against the baseline, with how to say it."""

    claim: Claim
    what: str
    unit: str
    lower_better: bool

    @property
    def better(self) -> bool | None:
        """True/False when the claim names a direction (the variant better or worse than the baseline)."""
        if self.claim.verdict not in (LOWER, HIGHER):
            return None
        return (self.claim.verdict == LOWER) == self.lower_better

    def show(self, value: float) -> str:
        return fmt(value, self.unit)

    @property
    def text(self) -> str:
        return wording(self.claim, self.what, self.show, "" if self.unit == "n" else self.unit)


def values(row: Row, key: str) -> list[Value]:
    """Each run's (repeat_index, value) of ``key`` in a row."""
    out: list[Value] = []
    for run, s in zip(row.runs, row.summaries, strict=True):
        v = s.get(key)
        idx = run.manifest.get("repeat_index")
        num = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        out.append((int(idx) if isinstance(idx, int) and not isinstance(idx, bool) else None, num))
    return out


def baseline(cmp: Comparison) -> Row | None:
    """The first complete row: what every other complete row is compared with."""
    return next((r for r in cmp.rows if r.status == "complete"), None)


def _has(row: Row, key: str) -> bool:
    return any(v is not None for _, v in values(row, key))


def versus(cmp: Comparison) -> list[Versus]:
    """Every complete row but the baseline against it, on each headline metric both rows have."""
    base = baseline(cmp)
    if base is None:
        return []
    out = []
    for row in cmp.rows:
        if row is base or row.status != "complete":
            continue
        found = [(h, hit) for h in HEADLINES if (hit := _option(h, base, row)) is not None]
        claims = [compare_values(k, row.variant, values(row, k), base.variant, values(base, k)) for _, (k, _) in found]
        for (h, (_, what)), claim in zip(found, holm(claims), strict=True):  # one family: the two rows' metrics
            out.append(Versus(claim, what, h.unit, h.lower_better))
    return out


def _option(h: Headline, base: Row, row: Row) -> tuple[str, str] | None:
    """The first of a headline's summary keys that both rows have, with its name."""
    return next(((k, w) for k, w in h.options if _has(base, k) and _has(row, k)), None)


def _observed(v: Versus) -> str:
    """A one-run claim's observed values, and the repeats the spread seen would need to tell them apart."""
    c = v.claim
    assert c.mean_a is not None and c.mean_b is not None and c.diff is not None
    u = "" if v.unit == "n" else f" {v.unit}"
    text = f"{v.what} {v.show(c.mean_a)}{u} vs {v.show(c.mean_b)}{u}"
    if c.spread is None:
        return text
    if c.needed is not None:
        return text + f" (the spread seen would need about {c.needed} repeats per variant to tell)"
    if c.diff == 0:
        return text + " (equal)"
    return text + f" (the spread seen would need more than {MAX_REPEATS} repeats per variant to tell)"


def sentences(items: list[Versus]) -> list[str]:
    """The claims as sentences for a reading: each with an interval on its own; a variant's one-run claims (no
    interval) with the same run counts grouped into one sentence that names no winner and says what the observed
    spread would need."""
    out: list[str] = []
    for variant in dict.fromkeys(v.claim.a for v in items):
        mine = [v for v in items if v.claim.a == variant]
        out += [v.text for v in mine if v.claim.verdict != NO_WINNER]
        alone = [v for v in mine if v.claim.verdict == NO_WINNER]
        for counts in dict.fromkeys((v.claim.n_a, v.claim.n_b) for v in alone):
            group = [v for v in alone if (v.claim.n_a, v.claim.n_b) == counts]
            c0 = group[0].claim
            runs = "run" if counts == (1, 1) else "runs"
            seen = "; ".join(_observed(v) for v in group)
            sentence = f"{variant} vs {c0.b} from {counts[0]} and {counts[1]} {runs}: {seen}; {no_winner(c0)}."
            if any(v.claim.spread is None for v in group):
                sentence += (
                    f" No variant has two runs to show its spread: at least {MIN_REPEATS_UNKNOWN_SPREAD} repeats per "
                    "variant are needed to tell."
                )
            out.append(sentence)
    return out


HEADERS = ["variant", "metric", "mean", "baseline", "diff", "95% CI", "change", "n", "method", "Holm p", "verdict"]


def _signed(value: float, unit: str) -> str:
    text = fmt(value, unit)
    return text if text.startswith("-") or value == 0 else "+" + text


def _verdict(v: Versus) -> str:
    c = v.claim
    if v.better is not None:
        return f"{c.verdict} ({'better' if v.better else 'worse'})"
    if c.verdict == NO_DIFFERENCE:
        return "no difference detected"
    if c.verdict == NO_WINNER:
        return "no winner: one run" + (f" (~{c.needed} repeats needed)" if c.needed else "")
    return c.verdict


def _p_cell(c: Claim) -> str:
    p = c.p_adjusted
    return "-" if p is None else ("<0.001" if p < 0.001 else f"{p:.2g}")


def cells(items: list[Versus]) -> list[list[str]]:
    """One text line per claim, in the order of HEADERS (diff and CI of variant - baseline)."""
    body = []
    for v in items:
        c = v.claim
        u = v.unit
        metric = v.what if u in ("n", "x") else f"{v.what} ({u})"
        ci = f"[{_signed(c.lo, u)}, {_signed(c.hi, u)}]" if c.lo is not None and c.hi is not None else "-"
        change = f"{c.relative * 100:+.0f}%" if c.relative is not None else "-"
        n = f"{c.n_a} vs {c.n_b}" if c.method != PAIRED and c.n_a != c.n_b else str(c.n)
        body.append([
            c.a, metric, fmt(c.mean_a, u), fmt(c.mean_b, u),
            _signed(c.diff, u) if c.diff is not None else "n/a",
            ci, change, n, c.method, _p_cell(c), _verdict(v),
        ])  # fmt: skip
    return body


NOTE = (
    "diff = variant - baseline; the interval is a paired t interval over the runs of the same repeat (same flow "
    f"placement), or a bootstrap of the difference of means ({RESAMPLES} resamples, seed {SEED}) where runs cannot be "
    "paired; a winner is named only where Holm's adjusted p over the variant's m metrics is at most 0.05, so a "
    "reading names a false winner on any of them at most 5% of the time, and never from one run per variant."
)


def title(cmp: Comparison) -> str:
    base = baseline(cmp)
    return f"vs baseline ({base.variant})" if base is not None else "vs baseline"


def to_text(cmp: Comparison) -> str:
    """The vs-baseline table as aligned text ("" with fewer than two complete rows)."""
    body = cells(versus(cmp))
    if not body:
        return ""
    widths = [max(len(HEADERS[i]), *(len(r[i]) for r in body)) for i in range(len(HEADERS))]
    lines = [title(cmp), "  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    return "\n".join([*lines, NOTE]) + "\n"


def to_markdown(cmp: Comparison) -> str:
    body = cells(versus(cmp))
    if not body:
        return ""
    esc = [[c.replace("|", "\\|") for c in line] for line in [HEADERS, *body]]
    lines = [f"## {title(cmp)}", "", "| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in HEADERS) + "|"]
    lines += ["| " + " | ".join(line) + " |" for line in esc[1:]]
    return "\n".join([*lines, "", NOTE]) + "\n"


CSV_FIELDS = ("variant", "baseline", "metric", "what", "mean", "baseline_mean", "diff", "lo", "hi", "relative", "n",
              "n_variant", "n_baseline", "method", "resamples", "p", "p_holm", "family", "verdict", "better",
              "repeats_needed", "claim")  # fmt: skip


def write_csv(cmp: Comparison, path: Path) -> bool:
    """The claims in SI units (``versus.csv``); False (and no file) with fewer than two complete rows."""
    items = versus(cmp)
    if not items:
        return False
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_FIELDS)
        for v in items:
            c = v.claim
            row: list[Any] = [c.a, c.b, c.metric, v.what, c.mean_a, c.mean_b, c.diff, c.lo, c.hi, c.relative, c.n,
                              c.n_a, c.n_b, c.method, c.resamples, c.p, c.p_adjusted, c.family, c.verdict, v.better,
                              c.needed, v.text]  # fmt: skip
            w.writerow(["" if x is None else repr(x) if isinstance(x, float) else x for x in row])
    return True
