"""results.placement on synthetic records: shared placement per repeat, new placements across repeats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from results.compare import Row
from results.placement import check, note, placement_of
from results.record import Run

FLOWS = [("h0", "ar", "0->1/ch0"), ("h1", "ar", "1->2/ch0"), ("h1", "sf", "f3")]


def _run(tmp: Path, name: str, repeat: int, ports: list[int] | None, mode: str | None = "per-repeat") -> Run:
    d = tmp / name
    d.mkdir()
    if ports is not None:
        lines = ["host,job,flow,sport"] + [f"{h},{j},{f},{p}" for (h, j, f), p in zip(FLOWS, ports, strict=False)]
        (d / "placement.csv").write_text("\n".join(lines) + "\n")
    manifest: dict[str, Any] = {"run_id": name, "status": "complete", "repeat_index": repeat}
    if mode is not None:
        manifest["placement"] = {"mode": mode, "seed": None if mode == "kernel" else repeat}
    return Run(d, manifest)


def _row(variant: str, runs: list[Run]) -> Row:
    return Row(variant, "complete", "ok", runs, [{} for _ in runs])


def test_shared_in_each_repeat_and_new_in_each(tmp_path: Path) -> None:
    ports = {0: [40000, 41000, 42000], 1: [33000, 34000, 35000], 2: [45000, 46000, 47000]}
    rows = [_row(v, [_run(tmp_path, f"{v}-{r}", r, ports[r]) for r in range(3)]) for v in ("ecn=off", "ecn=step")]
    assert placement_of(rows[0].runs[0]) == dict(zip(FLOWS, ports[0], strict=True))
    c = check(rows)
    assert c.repeats == {r: ["ecn=off", "ecn=step"] for r in range(3)} and not c.split and not c.same_repeats
    assert note(rows) == "Flow placement: shared by all variants in each of 3 repeats; new in each repeat."


def test_a_variant_that_moved_is_named_with_its_repeat(tmp_path: Path) -> None:
    rows = [
        _row("a", [_run(tmp_path, "a0", 0, [40000, 41000, 42000]), _run(tmp_path, "a1", 1, [33000, 34000, 35000])]),
        _row("b", [_run(tmp_path, "b0", 0, [40000, 41000, 42000]), _run(tmp_path, "b1", 1, [33000, 34001, 35000])]),
    ]
    assert check(rows).split == [(1, "a", "b", 1, 3)]
    assert note(rows) == (
        "Flow placement: NOT shared by the variants in repeat 1: a vs b (1 of 3 flows on other ports); new in each "
        "repeat."
    )


def test_fixed_placement_is_the_same_in_every_repeat(tmp_path: Path) -> None:
    same = [40000, 41000, 42000]
    rows = [_row(v, [_run(tmp_path, f"{v}{r}", r, same, "fixed") for r in range(2)]) for v in ("a", "b")]
    assert check(rows).same_repeats == [(0, 1)]
    assert note(rows) == (
        "Flow placement: shared by all variants in each of 2 repeats; the same in every repeat (placement: fixed)."
    )


def test_kernel_and_old_records_say_placement_was_not_controlled(tmp_path: Path) -> None:
    kernel = [_row(v, [_run(tmp_path, f"k{v}", 0, [], "kernel")]) for v in ("a", "b")]
    assert note(kernel) == (
        "Flow placement: not controlled (the kernel picked the source ports), so the variants' flows may have taken "
        "different paths."
    )
    old = [_row(v, [_run(tmp_path, f"o{v}", 0, None, None)]) for v in ("a", "b")]
    assert "not recorded (older records" in note(old)
    single = [_row("a", [_run(tmp_path, "s", 0, [40000, 41000, 42000])])]
    assert note(single) == ""  # one run: nothing to share


def test_one_variant_over_repeats_says_whether_they_differ(tmp_path: Path) -> None:
    rows = [_row("a", [_run(tmp_path, f"a{r}", r, [40000 + r, 41000, 42000]) for r in range(3)])]
    assert note(rows) == "Flow placement: new in each of 3 repeats."
