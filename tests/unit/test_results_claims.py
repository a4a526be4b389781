"""Claims with n and an interval (results.claims), the vs-baseline table (results.versus) and the reading built on
them (results.html.reading): known answers on synthetic per-run values, and the A/A sweep's label key."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from results import versus
from results.claims import (
    BOOTSTRAP,
    HIGHER,
    LOWER,
    NO_DIFFERENCE,
    NO_INTERVAL,
    NO_WINNER,
    PAIRED,
    RESAMPLES,
    bootstrap_interval,
    compare_values,
    holm,
    repeats_needed,
    wording,
)
from results.compare import compare, detect_variants
from results.html import reading
from results.record import Run
from testbed.spec.scenario import expand, resolved


def _ms(v: float) -> str:
    return f"{v * 1e3:.3g}"


def _count(v: float) -> str:
    return f"{v:.3g}"


def test_paired_t_interval_known_answer() -> None:
    # differences 1, 2, 3, 4 (in any order of the runs): mean 2.5, s = 1.29099, t(0.975, 3) = 3.18245
    a = [(2, 14.0), (0, 10.0), (3, 16.0), (1, 12.0)]
    b = [(0, 9.0), (1, 10.0), (2, 11.0), (3, 12.0)]
    c = compare_values("m", "A", a, "B", b)
    half = 3.182446 * math.sqrt(5 / 3) / 2
    assert c.method == PAIRED and c.n == 4 and c.verdict == HIGHER
    assert c.diff == pytest.approx(2.5)
    assert (c.lo, c.hi) == (pytest.approx(2.5 - half), pytest.approx(2.5 + half))
    assert (c.lo, c.hi) == (pytest.approx(0.44574, abs=1e-5), pytest.approx(4.55426, abs=1e-5))
    assert c.mean_a == pytest.approx(13.0) and c.mean_b == pytest.approx(10.5)
    assert c.relative == pytest.approx(2.5 / 10.5)


def test_no_drops_against_forty_over_three_repeats_is_a_win_with_its_wording() -> None:
    ecn = [(0, 0.0), (1, 0.0), (2, 0.0)]
    droptail = [(0, 35.0), (1, 40.0), (2, 45.0)]
    c = compare_values("drops_total", "ecn", ecn, "drop-tail", droptail)
    half = 4.30265 * 5 / math.sqrt(3)  # s of the differences = 5, t(0.975, 2) = 4.30265
    assert c.verdict == LOWER and c.winner
    assert (c.diff, c.lo, c.hi) == (pytest.approx(-40), pytest.approx(-40 - half), pytest.approx(-40 + half))
    assert wording(c, "drops", _count) == (
        "ecn lower than drop-tail on drops by 40 or 100% (95% CI [27.6, 52.4], n = 3, paired; p = 0.0052)."
    )
    assert c.p == pytest.approx(2 * 0.002582, abs=1e-5)  # t = 40 / (5 / sqrt 3) = 13.86 on 2 degrees of freedom


def test_bootstrap_known_answer_on_a_fixed_seed() -> None:
    # a is constant, so a resample's difference is -(k/10) with k ~ Binomial(10, 1/2): its 2.5th and 97.5th
    # percentiles are k = 2 and k = 8 (P(k <= 1) = 1.1%, P(k <= 2) = 5.5%)
    a = [(i, 0.0) for i in range(5)]
    b = [(i, float(i % 2)) for i in range(10)]  # 10 runs against 5: cannot be paired
    c = compare_values("m", "A", a, "B", b)
    assert c.method == BOOTSTRAP and c.resamples == RESAMPLES and (c.n, c.n_a, c.n_b) == (5, 5, 10)
    assert (c.diff, c.lo, c.hi) == (pytest.approx(-0.5), pytest.approx(-0.8), pytest.approx(-0.2))
    assert c.verdict == LOWER
    assert compare_values("m", "A", a, "B", b) == c  # the same seed: the same report every time
    assert c.p == pytest.approx(2 / 1024, abs=0.0015)  # k = 0 (difference 0) has probability 1/1024: one tail
    assert "n = 5 vs 10, bootstrap, 10000 resamples; p = " in wording(c, "m", _count)


def test_bootstrap_is_reproducible_and_depends_on_its_seed() -> None:
    a, b = [3.1, 4.7, 2.2, 5.0], [1.0, 2.5, 0.4]
    assert bootstrap_interval(a, b, seed=7) == bootstrap_interval(a, b, seed=7)
    assert bootstrap_interval(a, b, seed=7) != bootstrap_interval(a, b, seed=8)
    diff, lo, hi, p = bootstrap_interval(a, b, resamples=2000, seed=7)
    assert diff == pytest.approx(3.75 - 1.3) and lo < diff < hi and 1 / 2000 <= p <= 1


def test_a_missing_pair_falls_back_to_the_bootstrap() -> None:
    a = [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert compare_values("m", "A", a, "B", [(0, 1.0), (1, 2.0), (3, 3.0)]).method == BOOTSTRAP  # repeat 2 vs 3
    assert compare_values("m", "A", a, "B", [(0, 1.0), (1, None), (2, 3.0)]).method == BOOTSTRAP  # a value missing
    assert compare_values("m", "A", a, "B", [(None, 1.0), (None, 2.0), (None, 3.0)]).method == BOOTSTRAP  # old records
    assert compare_values("m", "A", a, "B", [(0, 1.5), (1, 2.5), (2, 3.5)]).method == PAIRED


def test_no_difference_wording() -> None:
    a = [(0, 0.010), (1, 0.012), (2, 0.011)]
    b = [(0, 0.011), (1, 0.010), (2, 0.012)]
    c = compare_values("fct_p99_s", "A", a, "B", b)
    assert c.verdict == NO_DIFFERENCE and not c.winner
    assert c.lo is not None and c.hi is not None and c.lo < 0 < c.hi
    assert wording(c, "FCT p99", _ms, "ms") == (
        f"A vs B: no difference detected on FCT p99 at n = 3 (95% CI [{_ms(c.lo)}, {_ms(c.hi)}] ms, paired; p = 1)."
    )


def test_aa_pairs_of_identical_distributions_name_no_winner() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    shuffled = [3.0, 5.0, 1.0, 2.0, 4.0]  # the same values in other repeats: the differences sum to 0
    c = compare_values("m", "A", list(enumerate(values)), "B", list(enumerate(shuffled)))
    assert c.method == PAIRED and c.diff == pytest.approx(0) and c.verdict == NO_DIFFERENCE
    twice = list(enumerate(values[:4] * 2))  # unequal repeats: the bootstrap, centred on 0
    c = compare_values("m", "A", list(enumerate(values[:4])), "B", twice)
    assert c.method == BOOTSTRAP and c.verdict == NO_DIFFERENCE


def test_repeats_needed_iterates_the_t_formula() -> None:
    # t(0.975, n-1) / sqrt(n) < 1 first at n = 7: 2.571/sqrt(6) = 1.05, 2.447/sqrt(7) = 0.925
    assert repeats_needed(1.0, 1.0) == 7
    assert repeats_needed(-1.0, 1.0) == 7
    assert repeats_needed(100.0, 1.0) == 2
    assert repeats_needed(0.0, 1.0) is None
    assert repeats_needed(1e-6, 1.0) is None  # beyond the cap


def test_one_run_per_variant_names_no_winner_and_says_what_it_would_take() -> None:
    c = compare_values("m", "A", [(0, 5.0)], "B", [(0, 7.0)])
    assert c.method == NO_INTERVAL and c.verdict == NO_WINNER and c.needed is None and c.spread is None
    text = wording(c, "drops", _count)
    assert text == (
        "A vs B on drops: 5 vs 7 from 1 and 1 run; no winner named from one run per variant. No variant has two "
        "runs to show its spread: at least 3 repeats per variant are needed to tell."
    )
    # B's runs spread with s = 2, so a difference of two runs has s = 2*sqrt(2); n = 3: 4.303*2.83/1.73 = 7.0 < 12
    c = compare_values("m", "A", [(0, 10.0)], "B", [(0, 20.0), (1, 22.0), (2, 24.0)])
    assert c.verdict == NO_WINNER and c.spread == pytest.approx(2 * math.sqrt(2)) and c.needed == 3
    text = wording(c, "drops", _count)
    assert "from 1 and 3 runs; no winner named" in text
    assert "(s = 2.83 for a difference of two runs) would need about 3 repeats per variant to tell a 12 diff" in text
    assert " lower than " not in text and " higher than " not in text


# reading and table on synthetic comparisons


def _runs(variants: dict[str, list[dict[str, Any]]]) -> tuple[list[Run], dict[str, dict[str, Any]]]:
    """Complete runs in memory: one per summary, repeat i of each variant; the scenario differs in ``label``."""
    runs, sums = [], {}
    for label, summaries in variants.items():
        for i, s in enumerate(summaries):
            rid = f"{label}-{i}"
            m = {"run_id": rid, "status": "complete", "scenario_name": "x", "scenario": {"name": "x", "label": label}}
            runs.append(Run(Path("/nonexistent") / rid, {**m, "repeat_index": i}))
            sums[rid] = s
    return runs, sums


def _summary(drops: float, fct: float, goodput: float = 1e8) -> dict[str, Any]:
    return {"drops_total": drops, "fct_p99_s": fct, "goodput_bps": goodput, "coll_iter_p99_s": None,
            "coll_iter_p50_s": 0.1 + fct, "not_applicable": {"coll_iter_p99_s": "fewer than 100 iterations"}}  # fmt: skip


def test_reading_names_ecn_the_winner_on_drops_over_three_paired_repeats() -> None:
    runs, sums = _runs(
        {
            "A-droptail": [_summary(35, 0.050), _summary(40, 0.060), _summary(45, 0.055)],
            "B-ecn": [_summary(0, 0.020), _summary(0, 0.021), _summary(0, 0.019)],
        }
    )
    cmp = compare(runs, sums)
    assert [r.variant for r in cmp.rows] == ["A-droptail", "B-ecn"]
    text = reading(cmp, notes=["The compared variants shared their flow placement in every repeat."])
    assert "Against the baseline A-droptail" in text
    # four metrics compared at once: three with p = 0.0052 (the smallest, adjusted to 4 x 0.0052 = 0.021, and the
    # running maximum keeps the next two there), goodput with p = 1
    assert (
        "B-ecn lower than A-droptail on drops by 40 or 100% (95% CI [27.6, 52.4], n = 3, paired; Holm p = 0.021 "
        "over 4 metrics)." in text
    )
    assert "B-ecn lower than A-droptail on FCT p99 by 35 ms" in text
    assert "on collective iteration p50" in text and "iteration p99" not in text  # p99 null: p50 stands in
    assert "B-ecn vs A-droptail: no difference detected on aggregate goodput at n = 3" in text
    assert "B-ecn is better than A-droptail on collective iteration p50, FCT p99 and drops." in text
    assert (
        text.index("over 4 metrics).") < text.index("shared their flow placement") < text.index("Drops (mean per run)")
    )
    lines = versus.cells(versus.versus(cmp))
    drops = next(line for line in lines if line[1] == "drops")
    assert drops[:8] == ["B-ecn", "drops", "0", "40", "-40", "[-52.4, -27.6]", "-100%", "3"]
    assert drops[8:] == [PAIRED, "0.021", "lower (better)"]


def test_reading_never_names_a_winner_from_one_run_per_variant() -> None:
    runs, sums = _runs({"A": [_summary(1000, 5.0, 1e9)], "B": [_summary(0, 0.001, 1e3)]})
    text = reading(compare(runs, sums))
    assert " lower than " not in text and " higher than " not in text and "better" not in text
    assert text.count("no winner named from one run per variant") == 1  # one sentence per variant
    assert "B vs A from 1 and 1 run: collective iteration p50 101 ms vs 5100 ms; FCT p99 1 ms vs 5000 ms;" in text
    assert "at least 3 repeats per variant are needed to tell" in text
    assert "No winner named between" not in text  # the one-run sentence says it once


def test_a_metric_with_one_run_on_a_side_names_no_winner_there_alone() -> None:
    a = [_summary(30, 0.05), _summary(36, 0.06), _summary(33, 0.055)]
    b = [_summary(0, 0.02), _summary(0, 0.021), _summary(0, 0.019)]
    for s in b[1:]:  # two of the baseline's runs could not compute the FCT p99
        s["fct_p99_s"] = None
    runs, sums = _runs({"A": b, "B": a})
    text = reading(compare(runs, sums))
    assert "B lower than A on drops" not in text and "B higher than A on drops by 33 or" not in text
    assert "B higher than A on drops by 33 (95% CI" in text  # the baseline's 0 drops: no percentage
    assert "B vs A from 3 and 1 runs: FCT p99 55 ms vs 20 ms (the spread seen would need about 3 repeats per " \
        "variant to tell); no winner named from one run of A." in text  # fmt: skip
    assert "B is worse than A on collective iteration p50 and drops." in text


def test_aa_sweep_by_label_changes_nothing_but_the_name_and_names_no_winner() -> None:
    data = {
        "name": "aa",
        "fabric": {"topology": "spine-leaf", "spines": 1, "leaves": 2, "hosts_per_leaf": 1},
        "sweep": {"label": ["A", "B"]},
        "repeat": 2,
    }
    points = expand(data).points
    assert [(p.label, p.repeat_index) for p in points] == [("A", 0), ("A", 1), ("B", 0), ("B", 1)]
    a0, b0 = resolved(points[0]), resolved(points[2])
    assert a0.pop("label") == "A" and b0.pop("label") == "B" and a0 == b0  # the same setting otherwise
    assert points[0].seed == points[2].seed  # so the same flow placement in each repeat
    assert "label" not in resolved(expand({k: v for k, v in data.items() if k != "sweep"}).base)  # absent by default
    runs = [
        Run(Path("/nonexistent") / f"r{i}", {"run_id": f"r{i}", "status": "complete", "scenario": resolved(p),
                                             "repeat_index": p.repeat_index})
        for i, p in enumerate(points)
    ]  # fmt: skip
    v = detect_variants(runs)
    assert v.keys == ["label"] and [v.labels[r.run_id] for r in runs] == ["A", "A", "B", "B"]
    same = [_summary(10, 0.03), _summary(12, 0.04)]
    cmp = compare(runs, {r.run_id: copy.deepcopy(same[i % 2]) for i, r in enumerate(runs)})
    text = reading(cmp)
    assert "no difference detected on drops at n = 2" in text and "No winner named between B and A." in text


@pytest.mark.parametrize(("label", "reason"), [(["A"], "short name"), (True, "short name"), ("", "non-empty"),
                                               ("x" * 61, "at most 60")])  # fmt: skip
def test_bad_labels_are_refused_naming_the_key(label: Any, reason: str) -> None:
    from testbed.spec.fields import SpecError

    data = {"name": "x", "fabric": {"topology": "spine-leaf", "spines": 1, "leaves": 2, "hosts_per_leaf": 1}}
    with pytest.raises(SpecError) as err:
        expand({**data, "label": label})
    assert err.value.path == "label" and reason in err.value.reason


def test_holm_keeps_a_strong_claim_and_holds_back_a_weak_one_of_the_same_family() -> None:
    # two metrics: p 0.01 and 0.04; Holm adjusts the smaller to 2 x 0.01 = 0.02 (kept) and the other to
    # max(0.02, 1 x 0.04) = 0.04 (kept); with a third metric at p 0.5, 0.04 becomes 2 x 0.04 = 0.08 (held back)
    base = compare_values("m", "A", [(0, 10.0), (1, 10.5), (2, 11.0)], "B", [(0, 0.0), (1, 0.0), (2, 0.0)])
    assert base.lo is not None and base.lo > 0  # the interval alone excludes 0: the family decides
    strong, weak = replace(base, p=0.01, p_adjusted=0.01), replace(base, metric="w", p=0.04, p_adjusted=0.04)
    null = replace(base, metric="n", p=0.5, p_adjusted=0.5, lo=-1.0, hi=2.0)
    two = holm([strong, weak])
    assert [c.p_adjusted for c in two] == [pytest.approx(0.02), pytest.approx(0.04)] and all(c.winner for c in two)
    three = holm([weak, null, strong])
    assert [c.p_adjusted for c in three] == [pytest.approx(0.08), pytest.approx(0.5), pytest.approx(0.03)]
    assert [c.verdict for c in three] == [NO_DIFFERENCE, NO_DIFFERENCE, HIGHER] and three[0].family == 3
    assert "; Holm p = 0.08 over 3 metrics)" in wording(three[0], "w", _count)


def test_aa_readings_name_a_false_winner_at_most_five_percent_of_the_time() -> None:
    # five independent metrics that do not differ, five paired repeats: the family must name a false winner in at
    # most 5% of readings (Holm), where five separate 95% intervals would in about 23%
    rng = np.random.default_rng(7)
    readings, false_family, false_alone = 2000, 0, 0
    for _ in range(readings):
        alone = []
        for m in range(5):
            x, y = rng.normal(size=5), rng.normal(size=5)
            alone.append(
                compare_values(f"m{m}", "A", list(enumerate(map(float, x))), "B", list(enumerate(map(float, y))))
            )
        false_family += any(c.winner for c in holm(alone))
        false_alone += any(c.winner for c in alone)
    assert false_family / readings <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / readings)
    assert false_alone / readings > 0.15  # the problem the family solves
