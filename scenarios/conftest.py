"""Scenario tests: run an experiment's scenario file through the harness, then check the field's result.

Every point of the sweep becomes a run record under ``runs/scenarios/<session>/<scenario>/`` and the comparison
report (table, plots, report.html) goes beside it; pytest prints where. A run that the fidelity guardrails marked
not faithful (CPU saturated, a busy link below its rate, ...) is run again (by ``testbed.run.run_file``), up to
``RETAKES`` times (2: a shared 2-core machine, or the software-emulated guest, stalls now and then, sometimes twice
in a row); every unfaithful record stays beside the
retake, which names them in its manifest (``retake_of``). A run that failed (an error, not a verdict) is not run
again. A point still not faithful, or failed, fails the test before any result is asserted: the emulator could not
produce the numbers. ``TESTBED_RETAKES=0`` turns retakes off.

Retakes are the exception, so the session ends with one line that counts them, also when it is 0 and when tests
failed: ``testbed: 0 points retaken (of 37 points run)``, naming each retaken point when there are any.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
RUNS = Path(os.environ.get("TESTBED_SCENARIO_RUNS", HERE.parent / "runs" / "scenarios"))
SESSION = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
RETAKES = int(os.environ.get("TESTBED_RETAKES", "2"))
# every scenario file this session ran unchanged (name, overrides) -> its Experiment, all points faithful
SESSION_RUNS: dict[tuple[str, str], Experiment] = {}


@dataclass
class RetakeTally:
    """Every point this session ran, and the ones ``run_file`` retook (``scenario/variant (n retakes)``)."""

    points: int = 0
    retaken: list[str] = field(default_factory=list)

    def line(self) -> str:
        head = f"testbed: {len(self.retaken)} point{'' if len(self.retaken) == 1 else 's'} retaken"
        head += f" (of {self.points} point{'' if self.points == 1 else 's'} run)"
        return head + (": " + "; ".join(self.retaken) if self.retaken else "")


TALLY = pytest.StashKey[RetakeTally]()


def _variant_text(variant: Any) -> str:
    parts = []
    for key, value in variant:
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
        parts.append(f"{key.split('.')[-1]}={text}")
    return ", ".join(parts)


def tally_retakes(config: pytest.Config, name: str, points: Any, results: Any) -> None:
    """Count ``run_file``'s results (one per point, in the points' order) and the points it retook."""
    tally = config.stash.setdefault(TALLY, RetakeTally())
    tally.points += len(results)
    for point, r in zip(points, results):
        if r.retaken:
            n = len(r.retaken)
            variant, rep = _variant_text(point.variant), point.repeat_index
            label = name + (f"/{variant}" if variant else "") + (f" #{rep}" if rep else "")
            still = "" if r.faithful else (", still NOT FAITHFUL" if r.faithful is False else f", then {r.status}")
            tally.retaken.append(f"{label} ({n} retake{'' if n == 1 else 's'}{still})")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> Iterator[None]:
    """After pytest's short test summary, just before its final counts line."""
    yield
    terminalreporter.write_line(config.stash.get(TALLY, RetakeTally()).line())


@dataclass
class Point:
    """One run of an experiment: the sweep values, the summary metrics, the manifest."""

    variant: dict[str, Any]
    summary: dict[str, Any]
    manifest: dict[str, Any]
    path: Path

    def __getitem__(self, key: str) -> Any:
        return self.summary[key]

    def queue(self, name: str) -> dict[str, Any]:
        """Per-queue metrics of ``node:dev`` (e.g. ``l1:l1-l1h1``)."""
        return dict(self.summary["queues"][name])

    def job(self, name: str) -> dict[str, Any]:
        return dict(self.summary["collective_per_job"][name])

    def table(self, name: str) -> list[dict[str, Any]]:
        """One table's rows as dicts (``results.record.Run.rows``); ``frame`` for a large one."""
        from results.record import load_run

        return load_run(self.path).rows(name)

    def frame(self, name: str) -> Any:
        """One table as a pandas DataFrame (``results.record.Run.table``): queues.csv and links.csv are large."""
        from results.record import load_run

        return load_run(self.path).table(name)

    @property
    def scenario(self) -> dict[str, Any]:
        """The point's resolved scenario (manifest ``scenario``): typed where the spec types it (``rate_bps``,
        ``mtu``, ``duration``), sizes and thresholds as written (``"300KB"``, ``marking.k``)."""
        return dict(self.manifest["scenario"])

    def param(self, dotted: str) -> Any:
        """One value of the resolved scenario by key path, e.g. ``fabric.host_link.rate_bps``, ``workload.0.size``."""
        node: Any = self.manifest["scenario"]
        for key in dotted.split("."):
            node = node[int(key)] if isinstance(node, list) else node[key]
        return node

    def port(self, name: str) -> dict[str, Any]:
        """The egress port ``node:dev`` as the run built it (manifest ``fabric.ports``: ``rate_bps``, ``mtu``,
        ``buffer_bytes``, ``delay_s``, ``peer``, ...)."""
        node, dev = name.split(":", 1)
        found = [p for p in self.manifest["fabric"]["ports"] if p["node"] == node and p["dev"] == dev]
        if len(found) != 1:
            raise KeyError(f"{self.path}: {len(found)} ports named {name}")
        return dict(found[0])

    def hop(self, node: str, peer: str) -> dict[str, Any]:
        """The egress port of ``node`` towards ``peer`` (one hop of a path)."""
        found = [p for p in self.manifest["fabric"]["ports"] if p["node"] == node and p["peer"] == peer]
        if len(found) != 1:
            raise KeyError(f"{self.path}: {len(found)} ports from {node} to {peer}")
        return dict(found[0])

    @classmethod
    def from_record(cls, path: Path) -> Point:
        """A point read back from a run record (e.g. a reference recorded by another session)."""
        from results.record import load_run

        rec = load_run(path)
        return cls(dict(rec.manifest.get("variant") or {}), rec.summary or {}, rec.manifest, path)


@dataclass
class Experiment:
    name: str
    points: list[Point]
    report: Path
    notes: list[str] = field(default_factory=list)
    sweep: dict[str, list[Any]] = field(default_factory=dict)  # the sweep as run (overrides applied)

    def matching(self, **match: Any) -> list[Point]:
        """Every point whose variant has these values, in sweep order. Keys are the sweep key's last component (or
        the whole key); a value is compared with ``==``, or called on the variant's value when it is callable.
        Several points share a variant only when REVERSED runs one setting at every point."""
        return [p for p in self.points if _matches(p.variant, match)]

    def where(self, **match: Any) -> Point:
        """The one point whose variant has these values (see ``matching``)."""
        found = self.matching(**match)
        if len(found) != 1:
            raise KeyError(f"{len(found)} points match {match} among {[p.variant for p in self.points]}")
        return found[0]

    def where_not(self, **match: Any) -> Point:
        """The one point whose variant does not have these values (the other side of a two-setting sweep)."""
        found = [p for p in self.points if not _matches(p.variant, match)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} points do not match {match} among {[p.variant for p in self.points]}")
        return found[0]

    def common(self, value: Callable[[Point], Any]) -> Any:
        """``value(point)``, the same at every point: a setting the sweep does not vary."""
        seen = {repr(v): v for v in (value(p) for p in self.points)}
        if len(seen) != 1:
            raise ValueError(f"{self.name}: expected one value at every point, got {sorted(seen)}")
        return next(iter(seen.values()))

    def expect(self, ok: bool, what: str) -> None:
        """Assert with the measured-vs-expected message and where the report is."""
        if not ok:
            pytest.fail(f"{self.name}: {what}\n  report: {self.report}", pytrace=False)


def _last(variant: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in variant.items():
        out[k.split(".")[-1]] = v
        out[k] = v
    return out


def _matches(variant: dict[str, Any], match: dict[str, Any]) -> bool:
    values = _last(variant)
    return all(k in values and (want(values[k]) if callable(want) else values[k] == want) for k, want in match.items())


def load(name: str) -> dict[str, Any]:
    """scenarios/<name>.yaml as a dict (test modules: ``scenario_helpers.scenario_data``)."""
    from testbed.spec.scenario import resolve_paths

    data = yaml.safe_load((HERE / f"{name}.yaml").read_text())
    assert isinstance(data, dict)
    return resolve_paths(data, HERE)


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    from testbed.spec.scenario import _set_path

    _set_path(data, dotted, value)


def _unfaithful(manifest: dict[str, Any]) -> str:
    return "; ".join((manifest.get("fidelity") or {}).get("failed", []))  # fidelity.verdict's "check: reason"s


@pytest.fixture
def experiment(request: pytest.FixtureRequest) -> Iterator[Callable[..., Experiment]]:
    """``experiment("ecn", **{"fabric.host_link.rate": "50Mbit"})`` runs scenarios/ecn.yaml (with overrides)."""
    from results.cli import defer_report, report_main
    from results.record import load_run
    from testbed.machine import here
    from testbed.plan.guestfit import under_tcg
    from testbed.run import run_file
    from testbed.spec.scenario import expand

    def run(name: str, data: dict[str, Any] | None = None, **overrides: Any) -> Experiment:
        run_key = (name, repr(sorted(overrides.items())))
        if data is None and run_key in SESSION_RUNS:  # the lab sheets' test reads the scenario tests' runs
            return SESSION_RUNS[run_key]
        scenario = copy.deepcopy(data) if data is not None else load(name)
        for key, value in overrides.items():
            _set(scenario, key, value)
        out = RUNS / SESSION / request.node.name
        sf = expand(scenario)
        results = run_file(sf, out, lock_wait=1800, retake_unfaithful=RETAKES, machine=here(os.environ))
        label = name + (f"[{_variant_text(overrides.items())}]" if overrides else "")
        tally_retakes(request.config, label, sf.points, results)  # first: the report or a failed point may raise
        report = out / "report"
        if under_tcg(os.environ):  # the software-emulated guest: 46-72 s per report there, ~3 s on the host afterwards
            print(f"\nreport deferred to the host: {defer_report([r.path for r in results], report)}")
        else:
            report_main([*(str(r.path) for r in results), "-o", str(report)])
        points = []
        problems = []
        for r in results:
            for old in r.retaken:
                print(f"\n{old.name}: NOT FAITHFUL, retaken as {r.path.name}: {_unfaithful(load_run(old).manifest)}")
            rec = load_run(r.path)
            if r.status != "complete":
                problems.append(f"{r.path.name}: {r.status}: {r.error}")
                continue
            fid = rec.manifest.get("fidelity") or {}
            if fid.get("faithful") is False:
                problems.append(
                    f"{r.path.name}: NOT FAITHFUL (the emulation could not keep up): {_unfaithful(rec.manifest)}"
                )
            points.append(Point(dict(rec.manifest.get("variant") or {}), rec.summary or {}, rec.manifest, r.path))
        print(f"\n{name}: {len(results)} runs in {out}; report {report / 'report.html'}")
        if problems:
            pytest.fail(f"{name}: " + "\n  ".join(problems) + f"\n  report: {report}", pytrace=False)
        exp = Experiment(name, points, report / "report.html", sweep=copy.deepcopy(scenario.get("sweep") or {}))
        if data is None:
            SESSION_RUNS[run_key] = exp
        return exp

    yield run


@pytest.fixture
def judged(experiment: Callable[..., Experiment]) -> Callable[..., Experiment]:
    """``judged("ps_incast", judge, REVERSED_OVERRIDES)``: run the scenario, then ``judge(exp)`` (its asserts);
    keyword arguments are overrides by key path, as ``experiment`` takes them (``repeat=1``).

    ``REVERSED_OVERRIDES`` is the test module's mapping scenario name -> the overrides that undo the setting under
    study. With ``TESTBED_REVERSED=1`` (``scenario_helpers.REVERSED``, the test of the test) the scenario runs with
    those overrides applied, so the judge's assertion must fail."""
    from scenario_helpers import REVERSED

    def run(
        name: str, judge: Callable[[Experiment], None], reversed_overrides: dict[str, dict[str, Any]], **overrides: Any
    ) -> Experiment:
        undo = reversed_overrides[name]  # also without REVERSED: every judged scenario names its reversed setting
        exp = experiment(name, **{**overrides, **(undo if REVERSED else {})})
        judge(exp)
        return exp

    return run


@pytest.fixture
def runs_dir() -> Path:
    """Where the scenario tests' run records go (``TESTBED_SCENARIO_RUNS``, default runs/scenarios/)."""
    return RUNS


@pytest.fixture
def recorded() -> Callable[[Path], Point]:
    """``recorded(path)``: a run record read back as a ``Point`` (e.g. another session's reference run)."""
    return Point.from_record
