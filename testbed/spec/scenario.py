"""A scenario file (YAML): the fabric, the workload, how long to run, and the sweep axes.

::

    name: ecn-vs-droptail
    description: what the experiment shows, in a sentence or two
    label: A                       # optional: names the setting and nothing else (an A/A sweep: label: [A, B])
    fabric: {...}                  # testbed.spec.fabric.FabricSpec
    workload: [...]                # testbed.spec.workload.parse_workload
    duration: 10s                  # upper bound for the whole workload (every wait has a timeout)
    sweep:                         # axes: a dotted key path -> the values it takes; the points are the product
      fabric.host_link.ecn: [off, {mode: step, k: 30KB}]
    repeat: 1                      # repetitions of every point
    seed: 1
    telemetry: {queue_hz: 1000, link_hz: 100}   # bpf_queues: true adds qslots.csv, counted in the kernel
                                   # in slot_us (100) slots (testbed/telemetry/qslots.py)
    placement: {mode: per-repeat}  # who picks flows' source ports: per-repeat, fixed or kernel
                                   # (testbed/spec/placement.py)
    kernel: native                 # or stock: run inside a pinned stock kernel (testbed vm)

Loading validates everything (unknown keys, impossible values, every sweep point) and builds nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from testbed.spec.events import LinkEvent, parse_events
from testbed.spec.fabric import FabricSpec, Override
from testbed.spec.fields import SpecError, boolean, check_keys, integer, number, sub
from testbed.spec.placement import PlacementSpec, check_capacity
from testbed.spec.scaling import apply_scale
from testbed.spec.settings import Setting, check_against_sweep, naming_setting
from testbed.spec.topology import Topology
from testbed.spec.units import Size, UnitError, parse_duration
from testbed.spec.workload import StepJob, parse_workload

SCENARIO_KEYS = {
    "name",
    "description",
    "fabric",
    "workload",
    "events",
    "duration",
    "sweep",
    "repeat",
    "seed",
    "placement",
    "telemetry",
    "kernel",
    "label",
}
TELEMETRY_KEYS = {"queue_hz", "link_hz", "cpu_hz", "bpf_queues", "slot_us", "path_bytes"}


@dataclass(frozen=True)
class TelemetrySpec:
    """Sampler rates; ``bpf_queues``: also count every queue in the kernel (qslots.csv) in ``slot_us`` slots;
    ``path_bytes``: count each flow's bytes in every spine or core (path_bytes.csv, testbed.fabric.pathbytes)."""

    queue_hz: float = 1000.0
    link_hz: float = 100.0
    cpu_hz: float = 10.0
    bpf_queues: bool = False
    slot_us: float = 100.0
    path_bytes: bool = True

    @property
    def slot_ns(self) -> int:
        return int(self.slot_us * 1000)

    @classmethod
    def from_dict(cls, data: Any, path: str) -> TelemetrySpec:
        check_keys(data, TELEMETRY_KEYS, path)
        queue_hz = number(sub(path, "queue_hz"), data.get("queue_hz", 1000.0), 1.0, 20000.0)
        link_hz = number(sub(path, "link_hz"), data.get("link_hz", min(100.0, queue_hz)), 1.0, 2000.0)
        if link_hz > queue_hz:  # the sampler reads the links on some of its queue ticks
            raise SpecError(sub(path, "link_hz"), f"{link_hz:g} Hz is above queue_hz ({queue_hz:g} Hz)")
        return cls(
            queue_hz,
            link_hz,
            number(sub(path, "cpu_hz"), data.get("cpu_hz", 10.0), 0.0, 100.0),
            boolean(sub(path, "bpf_queues"), data.get("bpf_queues", False)),
            number(sub(path, "slot_us"), data.get("slot_us", 100.0), 10.0, 1e6),
            boolean(sub(path, "path_bytes"), data.get("path_bytes", True)),
        )


@dataclass(frozen=True)
class Scenario:
    name: str
    fabric: FabricSpec
    workload: tuple[Any, ...]
    raw: dict[str, Any] = field(compare=False)  # the resolved scenario as plain data (for the manifest)
    description: str = ""
    duration_s: float = 60.0
    repeat: int = 1
    seed: int = 1
    telemetry: TelemetrySpec = field(default_factory=TelemetrySpec)
    kernel: str = "native"
    variant: tuple[tuple[str, Any], ...] = ()  # this point's sweep values
    repeat_index: int = 0
    scale: dict[str, Any] | None = None  # rate scaling notes: both scales, and what does not scale
    placement: PlacementSpec = field(default_factory=PlacementSpec)  # who picks flows' source ports
    events: tuple[LinkEvent, ...] = ()  # scheduled link events (testbed.spec.events)
    label: str | None = None  # a name for the setting that changes nothing in the run (A/A sweeps)
    # the address plan the loader drew for ``fabric`` (shared by the points whose fabric specs are equal): read it
    # with ``topology()``
    topo: Topology | None = field(default=None, compare=False, repr=False)

    def topology(self) -> Topology:
        """The address plan of this point's fabric, drawn once: the loader's, or a new one for a point whose fabric
        was replaced after loading (a frozen spec's plan is a function of it, so an equal spec's plan serves)."""
        if self.topo is not None and self.topo.spec == self.fabric:
            return self.topo
        return Topology(self.fabric)


@dataclass(frozen=True)
class ScenarioFile:
    """A scenario and the points of its sweep (one point, the scenario itself, when there is no sweep)."""

    base: Scenario
    points: tuple[Scenario, ...]
    path: Path | None = None


def to_plain(obj: Any) -> Any:
    """A spec as plain JSON data with every default filled in (what the manifest records and reports compare)."""
    if isinstance(obj, Size):
        return str(obj)
    if isinstance(obj, Override):
        return {"selector": obj.selector, **{k: to_plain(v) for k, v in obj.values}}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        skip = ("raw", "topo")  # a scenario's source data and its drawn address plan
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name not in skip}
    if isinstance(obj, (list, tuple)):
        return [to_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, Fraction):
        return float(obj)
    return obj


def resolved(scenario: Scenario) -> dict[str, Any]:
    """The scenario as run: every spec with its defaults, so that runs compare key by key."""
    return {
        "name": scenario.name,
        "description": scenario.description,
        "fabric": to_plain(scenario.fabric),
        "workload": [to_plain(job) for job in scenario.workload],
        "duration_s": scenario.duration_s,
        "seed": scenario.seed,
        "placement": to_plain(scenario.placement),
        "telemetry": to_plain(scenario.telemetry),
        "kernel": scenario.kernel,
        **({"events": [to_plain(e) for e in scenario.events]} if scenario.events else {}),
        **({"label": scenario.label} if scenario.label is not None else {}),
    }


def _set_path(data: dict[str, Any], dotted: str, value: Any, where: str = "") -> None:
    """Set ``a.b.0.c`` in nested dicts and lists (a number indexes a list, e.g. ``workload.0.servers``); an error
    names ``where`` (default ``sweep.a.b.0.c``)."""
    where = where or f"sweep.{dotted}"
    keys = dotted.split(".")
    node: Any = data
    for i, k in enumerate(keys):
        last = i == len(keys) - 1
        if isinstance(node, list):
            if not k.isdigit() or int(k) >= len(node):
                raise SpecError(where, f"{k!r} is not an index of a list of {len(node)} items")
            if last:
                node[int(k)] = value
            else:
                node = node[int(k)]
        elif isinstance(node, dict):
            if last:
                node[k] = value
            else:
                node = node.setdefault(k, {})
        else:
            raise SpecError(where, f"{'.'.join(keys[:i])!r} is neither a mapping nor a list")


def _brief(value: Any, width: int = 60) -> str:
    """A sweep value in an error message: one line, at most ``width`` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _topology(fabric: FabricSpec, drawn: list[Topology]) -> Topology:
    """The address plan of ``fabric``: one in ``drawn`` for an equal spec (the specs are frozen and the plan is a
    function of the spec), else a new one, added to ``drawn``. A list, not a dict: an override's values may be
    mappings, which do not hash."""
    for topo in drawn:
        if topo.spec == fabric:
            return topo
    topo = Topology(fabric)  # refuses overrides naming links that do not exist
    drawn.append(topo)
    return topo


def build_scenario(
    data: dict[str, Any],
    variant: tuple[tuple[str, Any], ...] = (),
    repeat_index: int = 0,
    drawn: list[Topology] | None = None,
) -> Scenario:
    """One point. ``drawn``: the address plans drawn for the points before it, so that points with equal fabric
    specs (a sweep over the workload, the repetitions) share theirs."""
    check_keys(data, SCENARIO_KEYS, "", {"name", "fabric"})
    name = data["name"]
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise SpecError("name", f"must be a short identifier (letters, digits, - _ .), got {name!r}")
    if not isinstance(data["fabric"], dict):
        raise SpecError("fabric", f"expected a mapping (topology, spines, leaves, ...), got {data['fabric']!r}")
    fabric_raw, scale_notes = apply_scale(data["fabric"])
    fabric = FabricSpec.from_dict(fabric_raw, "fabric")
    topo = _topology(fabric, [] if drawn is None else drawn)
    workload = parse_workload(data.get("workload", []) or [], "workload")
    if scale_notes:  # a trace's compute times stretch with the rates
        factor = float(scale_notes["factor"])
        workload = tuple(replace(j, time_scale=factor) if isinstance(j, StepJob) else j for j in workload)
    for i, job in enumerate(workload):
        check_hosts = getattr(job, "hosts_used", None)
        for host in check_hosts() if callable(check_hosts) else ():
            if host not in topo.hosts:
                raise SpecError(
                    f"workload[{i}]", f"host {host!r} is not in this fabric (hosts look like {next(iter(topo.hosts))})"
                )
    try:
        duration = parse_duration(data.get("duration", "60s"))
    except UnitError as exc:
        raise SpecError("duration", str(exc)) from None
    if duration <= 0:
        raise SpecError("duration", f"must be above 0, got {data.get('duration')!r}")
    kernel = data.get("kernel", "native")
    if kernel not in ("native", "stock"):
        raise SpecError("kernel", f"must be native or stock, got {kernel!r}")
    placement = PlacementSpec.from_dict(data.get("placement", {}) or {}, "placement")
    check_capacity(placement, workload)
    return Scenario(
        name=name,
        fabric=fabric,
        workload=workload,
        raw=copy.deepcopy(data),
        description=str(data.get("description", "")),
        duration_s=duration,
        repeat=integer("repeat", data.get("repeat", 1), 1, 1000),
        seed=integer("seed", data.get("seed", 1), 0, 2**31),
        telemetry=TelemetrySpec.from_dict(data.get("telemetry", {}) or {}, "telemetry"),
        kernel=kernel,
        variant=variant,
        repeat_index=repeat_index,
        scale=scale_notes,
        placement=placement,
        events=_events(data, topo, duration, scale_notes),
        label=_label(data.get("label")),
        topo=topo,
    )


def _label(value: Any) -> str | None:
    """``label``: a short one-line name (text or a number) that only tells runs apart, so that a sweep over it
    (``sweep: {label: [A, B]}``) repeats one setting under two names: an A/A comparison."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpecError("label", f"must be a short name (text or a number), got {_brief(value)}")
    text = str(value)
    if not text.strip() or len(text) > 60 or "\n" in text:
        raise SpecError("label", f"must be one non-empty line of at most 60 characters, got {_brief(text)!r}")
    return text


def _events(data: dict[str, Any], topo: Topology, duration: float, scaled: Any) -> tuple[LinkEvent, ...]:
    events = parse_events(data.get("events"), "events", topo, duration)
    if scaled and any(e.rate_bps is not None for e in events):
        raise SpecError(
            "events", "a degraded rate under fabric.scale is not supported: give the loss only, or drop scale"
        )
    return events


def expand(data: dict[str, Any]) -> ScenarioFile:
    """Validate the scenario and every point of its sweep (times its repetitions)."""
    data = copy.deepcopy(data)
    sweep = data.pop("sweep", None) or {}
    if not isinstance(sweep, dict):
        raise SpecError("sweep", "expected a mapping of dotted key paths to lists of values")
    drawn: list[Topology] = []  # one address plan per distinct fabric spec, shared by its points
    base = build_scenario(data, drawn=drawn)
    axes = []
    for key, values in sweep.items():
        if not isinstance(key, str) or not key:
            raise SpecError("sweep", f"a sweep axis is a dotted key path (e.g. fabric.host_link.buffer), got {key!r}")
        if not isinstance(values, list) or not values:
            raise SpecError(f"sweep.{key}", "expected a non-empty list of values")
        if key.split(".")[0] not in SCENARIO_KEYS - {"sweep", "name"}:
            raise SpecError(
                f"sweep.{key}", "a sweep axis must be a key path inside the scenario, e.g. fabric.host_link.buffer"
            )
        axes.append((key, values))
    points = []
    combos = itertools.product(*[[(k, v) for v in vals] for k, vals in axes]) if axes else [()]
    for combo in combos:
        point = copy.deepcopy(data)
        for key, value in combo:
            _set_path(point, key, copy.deepcopy(value))
        for r in range(base.repeat):
            try:
                points.append(build_scenario(point, tuple(combo), r, drawn))
            except SpecError as exc:
                where = ", ".join(f"{k}={_brief(v)}" for k, v in combo)
                raise SpecError(exc.path, f"{exc.reason} (in sweep point {where})") from None
    return ScenarioFile(base, tuple(points))


def resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """A scenario read from a file in ``base``: its trace jobs' relative paths made absolute from there (in place:
    the resolved scenario, and so the manifest, names the file that ran)."""
    for job in data.get("workload") or []:
        if isinstance(job, dict) and job.get("kind") == "trace" and isinstance(job.get("path"), str) and job["path"]:
            job["path"] = str((base / job["path"]).resolve())
    return data


def apply_settings(data: dict[str, Any], settings: Sequence[Setting]) -> dict[str, Any]:
    """A copy of a scenario's data with every ``--set`` applied in order (testbed.spec.settings)."""
    data = copy.deepcopy(data)
    for s in settings:
        if s.key == "sweep":
            data["sweep"] = copy.deepcopy(s.value)
        elif s.key.startswith("sweep."):
            sweep = data.get("sweep") or {}
            if not isinstance(sweep, dict):
                raise SpecError(str(s), "the file's sweep is not a mapping of key paths to lists")
            data["sweep"] = {**sweep, s.key.removeprefix("sweep."): copy.deepcopy(s.value)}
        else:
            _set_path(data, s.key, copy.deepcopy(s.value), str(s))
    check_against_sweep([s for s in settings if s.key.split(".")[0] != "sweep"], data.get("sweep"))
    return data


def load_scenario_file(path: str | Path, settings: Sequence[Setting] = ()) -> ScenarioFile:
    """A scenario file and every point of its sweep, with ``settings`` (``--set KEY=VALUE``) applied first."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise SpecError("", f"scenario file {p} does not exist") from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            "", f"{p} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
        ) from None
    except OSError as exc:
        raise SpecError("", f"cannot read scenario file {p}: {exc.strerror}") from None
    except yaml.YAMLError as exc:  # one line: PyYAML's str() spans several
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError("", f"{p} is not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError("", f"{p} must hold a mapping (name, fabric, workload, ...)")
    try:
        sf = expand(resolve_paths(apply_settings(data, settings), p.parent))
    except SpecError as exc:
        raise naming_setting(exc, settings) from None
    return ScenarioFile(sf.base, sf.points, p)


def load_scenario(source: str | Path | dict[str, Any], settings: Sequence[Setting] = ()) -> Scenario:
    """A scenario without its sweep (the base point), from a YAML path or a dict, with ``settings`` applied."""
    if isinstance(source, dict):
        try:
            return expand(apply_settings(source, settings)).base
        except SpecError as exc:
            raise naming_setting(exc, settings) from None
    return load_scenario_file(source, settings).base
