"""The teaching labs' sheets: what a student is handed, what only the instructor reads, and the steps a test executes.

Each lab is two files of the same name (pure: parsing, the edit, the checks; no root):
- ``docs/labs/labN-NAME.md``, the student's sheet: the goal, the questions and, for an exploration lab, the setting
  to change. Its fenced blocks:
  - a plain block whose line is ``python3 -m testbed run scenarios/X.yaml -o runs/labN``: the run;
  - ``lab-cli``: ``python3 -m testbed cli scenarios/X.yaml`` then ``mininet> COMMAND`` lines;
  - ``yaml lab-change`` (exploration labs): the one setting, ``dotted.path: value`` (list items by index).
- ``docs/labs/instructor/labN-NAME.md``, the instructor's notes: what to expect, with the numbers of a run.
  Its fenced blocks:
  - ``yaml lab-fix`` (break-fix labs): the fix, one setting in the form of ``lab-change``;
  - ``yaml lab-expect``: checks on the run's summaries, each ``{metric, point, ...}`` with one of
    ``about`` + ``within: [lo, hi]`` (lo x about <= value <= hi x about), ``at_most``, ``at_least`` or ``matches``;
    ``point`` is the sweep point's index, ``over`` another point's index to take the ratio against; ``metric`` is a
    dotted path into the point's summary.json;
  - ``yaml lab-check`` (break-fix labs): checks of the same form that the fixed run must pass and the broken run
    must not. A student runs them on a record directory (``testbed lab check LAB DIR``) and sees only whether
    each passed, not the threshold.

A student sheet that carries an instructor's block, the fix's setting or the instructor's numbers is refused
(``leaks``), so that a sheet handed out cannot give the answer away. ``testbed lab show LAB`` prints the
student's sheet; ``--instructor`` adds the notes.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.errors import TestbedError

LABS = Path(__file__).resolve().parents[1] / "docs" / "labs"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
STUDENT_BLOCKS = ("lab-cli", "yaml lab-change")
INSTRUCTOR_BLOCKS = ("yaml lab-fix", "yaml lab-expect", "yaml lab-check")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.]*\d)")


class LabError(TestbedError, ValueError):
    """A lab that is not there, or a sheet that breaks the layout above (the message names the file)."""


@dataclass(frozen=True)
class LabSheet:
    student: Path
    instructor: Path
    scenario: str  # the scenario file the sheet runs, relative to the repository
    run_argv: tuple[str, ...]
    cli: tuple[str, ...] = ()  # the mininet> commands
    change: dict[str, Any] = field(default_factory=dict)  # the student's one setting (exploration labs)
    fix: dict[str, Any] = field(default_factory=dict)  # the instructor's one setting (break-fix labs)
    expect: tuple[dict[str, Any], ...] = ()
    fixed: tuple[dict[str, Any], ...] = ()  # lab-check: what the fix must show

    @property
    def name(self) -> str:
        return self.student.stem

    @property
    def break_fix(self) -> bool:
        return bool(self.fix)

    @property
    def applied(self) -> dict[str, Any]:
        """The one setting the labs' test applies to a copy of the scenario: the fix, else the student's change."""
        return self.fix or self.change


def _blocks(path: Path) -> list[tuple[str, str]]:
    if not path.is_file():
        raise LabError(f"{path}: no such file (a lab is docs/labs/labN-NAME.md and docs/labs/instructor/labN-NAME.md)")
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(path.read_text())]


def _one(blocks: list[tuple[str, str]], info: str, path: Path) -> Any:
    found = [yaml.safe_load(body) for kind, body in blocks if kind == info]
    if len(found) > 1:
        raise LabError(f"{path.name}: more than one `{info}` block")
    return found[0] if found else None


def parse(student: Path) -> LabSheet:
    """The lab's steps from the student's sheet and the instructor's notes beside it; LabError names what is
    missing or misplaced."""
    student = Path(student)
    instructor = student.parent / "instructor" / student.name
    mine, theirs = _blocks(student), _blocks(instructor)
    for kind, _ in mine:
        if kind in INSTRUCTOR_BLOCKS:
            raise LabError(f"{student.name}: a `{kind}` block belongs in the instructor's notes ({instructor})")
    for kind, _ in theirs:
        if kind in STUDENT_BLOCKS:
            raise LabError(f"{instructor.name} (instructor): a `{kind}` block belongs in the student's sheet")
    runs = [ln.strip() for info, body in mine if not info for ln in body.splitlines() if " testbed run " in ln]
    if len(runs) != 1:
        raise LabError(f"{student.name}: expected one `python3 -m testbed run` line, found {len(runs)}")
    argv = tuple(runs[0].split())
    cli = tuple(
        ln.removeprefix("mininet>").strip()
        for info, body in mine
        if info == "lab-cli"
        for ln in body.splitlines()
        if ln.startswith("mininet>")
    )
    change = _one(mine, "yaml lab-change", student) or {}
    fix = _one(theirs, "yaml lab-fix", instructor) or {}
    expect = _one(theirs, "yaml lab-expect", instructor)
    fixed = _one(theirs, "yaml lab-check", instructor) or []
    if bool(change) == bool(fix):
        raise LabError(
            f"{student.name}: expected either the student's `yaml lab-change` (an exploration lab) or the "
            "instructor's `yaml lab-fix` (a break-fix lab), not both or neither"
        )
    for what, value in (("lab-change", change), ("lab-fix", fix)):
        if not isinstance(value, dict) or len(value) > 1:
            raise LabError(f"{student.name}: the `yaml {what}` block must hold one setting")
    if not isinstance(expect, list) or not expect:
        raise LabError(f"{instructor.name} (instructor): expected a `yaml lab-expect` block with a list of checks")
    if not isinstance(fixed, list) or bool(fixed) != bool(fix):
        raise LabError(f"{instructor.name} (instructor): a break-fix lab has a `yaml lab-check` list, another none")
    return LabSheet(
        student, instructor, argv[argv.index("run") + 1], argv, cli, change, fix, tuple(expect), tuple(fixed)
    )


def lab_number(path: Path) -> int:
    return int(path.stem[3:].split("-")[0])


def sheets(labs: Path | None = None) -> list[Path]:
    """Every student sheet, in lab order (lab10 after lab9)."""
    labs = LABS if labs is None else labs
    return sorted(labs.glob("lab[0-9]*.md"), key=lab_number)


def find(name: str, labs: Path | None = None) -> Path:
    """The student sheet of ``lab6``, ``6``, ``lab6-hashing`` or a path to it; LabError lists the labs."""
    labs = LABS if labs is None else labs
    if Path(name).is_file():
        return Path(name)
    if not labs.is_dir():
        raise LabError(f"the lab sheets are in a clone's docs/labs/, and there is none at {labs}")
    want = name.removeprefix("lab").split("-")[0]
    for path in sheets(labs):
        if str(lab_number(path)) == want and (name.count("-") == 0 or name.removesuffix(".md") == path.stem):
            return path
    raise LabError(f"no lab {name!r}: the labs are {', '.join(p.stem for p in sheets(labs))}")


def for_scenario(scenario_name: str, labs: Path | None = None) -> Path | None:
    """The student sheet whose run line names a scenario file with this ``name:``, if any."""
    labs = LABS if labs is None else labs
    root = labs.parents[1]
    for path in sheets(labs):
        for info, body in _blocks(path):
            for ln in body.splitlines() if not info else ():
                if " testbed run " in ln:
                    argv = ln.split()
                    scenario = root / argv[argv.index("run") + 1]
                    data = yaml.safe_load(scenario.read_text()) if scenario.is_file() else None
                    if isinstance(data, dict) and data.get("name") == scenario_name:
                        return path
    return None


def _step(node: Any, rest: str, dotted: str) -> tuple[Any, str]:
    """The key (or list index) that ``rest`` starts with, and what follows it: keys may hold dots and colons
    (a sweep's ``workload.0.algorithm``, a queue's ``l1:l1-l1h1``), so the longest key that fits wins."""
    if isinstance(node, list):
        head, _, tail = rest.partition(".")
        return int(head), tail
    for key in sorted((k for k in node if rest == k or rest.startswith(f"{k}.")), key=len, reverse=True):
        return key, rest[len(key) + 1 :]
    raise KeyError(f"{dotted}: no {rest!r} there (a change edits a setting the file has)")


def set_dotted(data: Any, dotted: str, value: Any) -> None:
    """Set ``a.b.0.c`` in nested mappings and lists; KeyError names a missing step."""
    node, rest = data, dotted
    while True:
        key, rest = _step(node, rest, dotted)
        if not rest:
            node[key] = value
            return
        node = node[key]


def get_dotted(data: Any, dotted: str) -> Any:
    """The value at ``a.b.0.c`` (``queues.l1:l1-l1h1.drops`` in a summary); KeyError names a missing step."""
    node, rest = data, dotted
    while rest:
        key, rest = _step(node, rest, dotted)
        node = node[key]
    return node


def _flow(value: Any) -> str:
    """A value as a sheet writes it in YAML's flow style (``[26]``, ``100Mbit``, ``{a: 1}``)."""
    return str(yaml.safe_dump(value, default_flow_style=True, width=10**6)).removesuffix("\n...\n").strip()


def _leaves(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(f"{prefix}.{k}", v)
    else:
        yield prefix, value


def fix_spellings(sheet: LabSheet, scenario: dict[str, Any]) -> list[str]:
    """How the fix could be written in a sheet: its dotted path, and ``key: value`` of every leaf it changes
    from the broken ``scenario`` (a leaf it keeps, such as a link's name, is no part of the answer)."""
    out = []
    for dotted, value in sheet.fix.items():
        out.append(dotted)
        for path, leaf in _leaves(dotted, value):
            try:
                before = get_dotted(scenario, path)
            except (KeyError, IndexError, TypeError):
                before = None
            if before != leaf:
                out.append(f"{path.rpartition('.')[2]}: {_flow(leaf)}")
    return out


def expected_numbers(sheet: LabSheet) -> set[str]:
    """The instructor's numbers: every decimal figure in the notes, and every threshold of their checks that is
    not a small count (a count below 1000 reads like an ordinary number of a sheet: 16 streams, 100 Mbit/s)."""
    text = sheet.instructor.read_text()
    found = {n for n in NUMBER.findall(text) if "." in n}
    for item in (*sheet.expect, *sheet.fixed):
        for key in ("about", "at_most", "at_least"):
            if key in item and (isinstance(item[key], float) or abs(int(item[key])) >= 1000):
                found.add(str(item[key]))
    return found


def leaks(sheet: LabSheet, scenario: dict[str, Any]) -> list[str]:
    """What of the instructor's notes the student's sheet gives away: the fix's setting (as ``fix_spellings``
    writes it) and the expected numbers. Empty when the sheet can be handed out."""
    text = sheet.student.read_text()
    said = set(NUMBER.findall(text))
    out = [f"the fix: {s!r}" for s in fix_spellings(sheet, scenario) if s in text]
    out += [f"an expected number: {n}" for n in sorted(expected_numbers(sheet)) if n in said]
    out += [f"the instructor's heading: {h!r}" for h in ("instructor should expect", "The fix") if h in text]
    return out


def check(item: dict[str, Any], summaries: list[dict[str, Any]]) -> tuple[bool, str]:
    """One expectation against the points' summaries (in sweep order): (passed, what was seen)."""
    value = get_dotted(summaries[int(item["point"])], str(item["metric"]))
    if "over" in item:
        value = float(value) / float(get_dotted(summaries[int(item["over"])], str(item["metric"])))
    seen = f"{item['metric']} at point {item['point']}" + (f" over point {item['over']}" if "over" in item else "")
    if "about" in item:
        lo, hi = (float(x) * float(item["about"]) for x in item["within"])
        return lo <= float(value) <= hi, f"{seen}: {value:.3g}, expected {lo:.3g}-{hi:.3g}"
    if "at_most" in item:
        return float(value) <= float(item["at_most"]), f"{seen}: {value:.3g}, expected <= {item['at_most']}"
    if "at_least" in item:
        return float(value) >= float(item["at_least"]), f"{seen}: {value:.3g}, expected >= {item['at_least']}"
    if "matches" in item:
        return bool(re.fullmatch(str(item["matches"]), str(value))), f"{seen}: {value!r}, expected {item['matches']}"
    raise LabError(f"expectation {item} has no about/at_most/at_least/matches")


def run_summaries(directory: Path) -> list[dict[str, Any]]:
    """The summaries of the run records under ``directory``, in the order they ran (their names start with
    their start time): a sweep's points in sweep order."""
    runs = sorted(p.parent for p in Path(directory).glob("*/manifest.json") if (p.parent / "summary.json").exists())
    if not runs:
        raise LabError(f"{directory}: no run record with a summary.json here (run the scenario with -o {directory})")
    return [json.loads((r / "summary.json").read_text()) for r in runs]


def check_fix(sheet: LabSheet, summaries: list[dict[str, Any]]) -> list[tuple[bool, str]]:
    """The lab-check items against a run's summaries."""
    return [check(item, summaries) for item in sheet.fixed]


def sheet_text(student: Path, instructor: bool = False) -> str:
    """What ``testbed lab show`` prints: the student's sheet, and with ``instructor`` the notes after it."""
    sheet = parse(student)
    text = sheet.student.read_text().rstrip() + "\n"
    if instructor:
        text += f"\n---- instructor's notes ({sheet.instructor}) ----\n\n{sheet.instructor.read_text().rstrip()}\n"
    return text


def _show(args: argparse.Namespace) -> int:
    print(sheet_text(find(args.lab), args.instructor), end="")
    return 0


def _check(args: argparse.Namespace) -> int:
    sheet = parse(find(args.lab))
    if not sheet.fixed:
        print(f"{sheet.name} is not a break-fix lab: it has nothing to check")
        return 2
    results = check_fix(sheet, run_summaries(args.runs))
    for ok, seen in results:  # the metric and its value; the threshold is the instructor's
        print(f"{'ok  ' if ok else 'FAIL'}  {seen.partition(', expected')[0]}")
    print("the fix worked" if all(ok for ok, _ in results) else "not fixed yet")
    return 0 if all(ok for ok, _ in results) else 1


def _list(args: argparse.Namespace) -> int:
    if not LABS.is_dir():
        raise LabError(f"the lab sheets are in a clone's docs/labs/, and there is none at {LABS}")
    for path in sheets():
        title = path.read_text().partition("\n")[0].removeprefix("# ")
        print(f"{path.stem:30s} {title}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``testbed lab list | show LAB [--instructor] | check LAB RUN_DIR``."""
    ap = argparse.ArgumentParser(prog="testbed lab", description="the teaching labs' sheets (docs/labs/)")
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("list", help="the labs").set_defaults(fn=_list)
    s = sub.add_parser("show", help="print a lab's student sheet")
    s.add_argument("lab", help="lab6, 6, lab6-hashing or the sheet's path")
    s.add_argument("--instructor", action="store_true", help="add the instructor's notes: the fix and the numbers")
    s.set_defaults(fn=_show)
    c = sub.add_parser("check", help="did a break-fix lab's fix work? (exit 0 when every check passes)")
    c.add_argument("lab", help="lab6, 6, lab6-hashing or the sheet's path")
    c.add_argument("runs", type=Path, help="the -o directory of the fixed run")
    c.set_defaults(fn=_check)
    args = ap.parse_args(argv)
    return int(args.fn(args))
