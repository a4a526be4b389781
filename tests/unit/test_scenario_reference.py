"""docs/scenario-reference.md and docs/scenario.schema.json are generated from the spec declarations: stale files
fail here (regenerate with `python3 -m testbed.spec.reference`), and each declared section names exactly the keys
its parser accepts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.spec import reference
from testbed.spec.classes import LOSSLESS_KEYS
from testbed.spec.events import parse_event
from testbed.spec.fabric import FabricSpec
from testbed.spec.fields import SpecError
from testbed.spec.link import EcmpSpec, LinkSpec, Marking, TransportSpec
from testbed.spec.placement import PlacementSpec
from testbed.spec.scaling import SCALE_KEYS
from testbed.spec.scenario import TelemetrySpec, build_scenario
from testbed.spec.topology import Topology
from testbed.spec.workload import parse_job

REPO = Path(__file__).resolve().parents[2]


def test_the_generated_files_are_up_to_date() -> None:
    stale = [str(p.relative_to(REPO)) for p in reference.stale()]
    assert not stale, f"{', '.join(stale)} stale: regenerate with `{reference.COMMAND}` and commit the result"


def accepted(fn: Callable[[], Any]) -> set[str]:
    """The keys a parser accepts, as its refusal of an unknown key lists them."""
    with pytest.raises(SpecError, match="unknown key") as err:
        fn()
    m = re.search(r"allowed: ([^)]*)\)", str(err.value))
    assert m, str(err.value)
    return set(m.group(1).split(", "))


TOPO = Topology(FabricSpec())
PARSERS: dict[str, Callable[[], Any]] = {
    "scenario": lambda: build_scenario({"name": "x", "fabric": {}, "zz": 1}),
    "telemetry": lambda: TelemetrySpec.from_dict({"zz": 1}, "t"),
    "link": lambda: LinkSpec.from_dict({"zz": 1}, "l"),
    "override": lambda: FabricSpec.from_dict({"overrides": [{"zz": 1}]}),
    "ecn": lambda: Marking.from_dict({"mode": "step", "zz": 1}, "e"),
    "class": lambda: LinkSpec.from_dict({"classes": [{"zz": 1}]}, "l"),
    "ecmp": lambda: EcmpSpec.from_dict({"zz": 1}, "e"),
    "transport": lambda: TransportSpec.from_dict({"zz": 1}, "t"),
    "event": lambda: parse_event({"zz": 1}, "e", TOPO),
    "placement": lambda: PlacementSpec.from_dict({"zz": 1}, "p"),
}


@pytest.mark.parametrize("section", sorted(reference.all_sections()))
def test_each_section_names_the_keys_its_parser_accepts(section: str) -> None:
    declared = {k.key for k in reference.all_sections()[section]}
    if section.startswith("job:"):
        kind = section.removeprefix("job:")
        assert declared == accepted(lambda: parse_job({"kind": kind, "name": "j", "zz": 1}, "w"))
    elif section == "fabric":  # scale is read before the fabric's parser (testbed.spec.scaling)
        assert declared == accepted(lambda: FabricSpec.from_dict({"zz": 1})) | {"scale"}
    elif section == "scale":
        assert declared == SCALE_KEYS
    elif section == "lossless":
        assert declared == LOSSLESS_KEYS
    else:
        assert declared == accepted(PARSERS[section])


def test_every_job_key_and_section_key_says_what_it_means() -> None:
    for name, keys in reference.all_sections().items():
        assert all(k.doc for k in keys), (name, [k.key for k in keys if not k.doc])


def test_the_schema_accepts_every_shipped_scenario_and_refuses_an_unknown_key() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(reference.schema())
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert not errors, (path.name, errors[:3])
    bad = {
        "name": "x",
        "fabric": {"host_link": {"rat": "1Mbit"}},
        "workload": [{"kind": "iperf", "name": "a", "sz": 1}],
    }
    paths = sorted(tuple(e.absolute_path) for e in validator.iter_errors(bad))
    assert sorted({p[:2] for p in paths}) == [("fabric", "host_link"), ("workload", 0)]
    assert json.loads(reference.schema_text()) == reference.schema()
