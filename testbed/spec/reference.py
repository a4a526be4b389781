"""The scenario reference, generated: docs/scenario-reference.md (every key: path, type, default, meaning, units)
and docs/scenario.schema.json (a JSON Schema for editor completion), from the declarations: ``testbed.spec.keys``
for the sections, each job kind's ``spec_field`` declarations (testbed.spec.workload) and placement's.

``python3 -m testbed.spec.reference`` writes both; ``--check`` exits 1 naming a file that is stale.
tests/unit/test_scenario_reference.py fails when either is.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from testbed.spec import fields as f
from testbed.spec.keys import SECTIONS, Key
from testbed.spec.placement import PlacementSpec
from testbed.spec.workload import KINDS, SPEC_OF

REPO = Path(__file__).resolve().parents[2]
MARKDOWN = REPO / "docs" / "scenario-reference.md"
SCHEMA = REPO / "docs" / "scenario.schema.json"
COMMAND = "python3 -m testbed.spec.reference"

UNITS = {
    "rate": "rate: a number and a unit, in bit/s (100Mbit, 1Gbit)",
    "size": "size: bytes with a unit (300KB, 64KiB, 1500B) or packets (20pkt)",
    "duration": "duration: a number and a unit (10ms, 2s, 100us); a bare number is seconds, except in a link's delay,"
    " which tc reads itself and which must carry its unit (tc reads a bare number as microseconds)",
    "ratio": "ratio: '2:1', or a number at least 1",
}
# Where each section's keys sit in a scenario.
WHERE = {
    "scenario": "",
    "telemetry": "telemetry",
    "fabric": "fabric",
    "link": "fabric.host_link, fabric.fabric_link",
    "override": "fabric.overrides[]",
    "ecn": "ecn of a link, an override or a class",
    "class": "classes[] of a link or an override",
    "lossless": "lossless of a class",
    "ecmp": "fabric.ecmp",
    "transport": "fabric.transport",
    "scale": "fabric.scale",
    "event": "events[]",
    "placement": "placement",
}


def _job_keys(kind: str) -> tuple[Key, ...]:
    cls = SPEC_OF[kind]
    leave_out: frozenset[str] = getattr(cls, "LEAVE_OUT", frozenset())
    return tuple(
        _declared_key(fl, d)
        for fl in dataclasses.fields(cls)
        if (d := fl.metadata.get("spec")) is not None and (d.key or fl.name) not in leave_out
    )


def _placement_keys() -> tuple[Key, ...]:
    return tuple(_declared_key(fl, fl.metadata["spec"]) for fl in dataclasses.fields(PlacementSpec))


# The declared readers that are plain functions: their type in the reference.
_READER_TYPES: dict[Any, str] = {
    f.name: "string",
    f.host: "string",
    f.text: "string",
    f.boolean: "boolean",
    f.bytes_: "size",
    f.duration: "duration",
    f.durations: "durations",
    f.rate: "rate",
    f.rank_list: "ranks",
    f.host_pairs: "host pairs",
    f.size_sweep: "size sweep",
    f.size_distribution: "size distribution",
    f.rank_groups: "rank groups",
}


def _declared_key(fl: dataclasses.Field[Any], d: f.Declared) -> Key:
    reader = d.reader
    if isinstance(reader, f.Typed):
        typ, lo, hi, choices = reader.kind, reader.lo, reader.hi, reader.choices
    else:
        typ, lo, hi, choices = _READER_TYPES[reader], None, None, ()
    default = "" if d.required or fl.default in (None, "", ()) else _default_text(fl.default, typ)
    if isinstance(fl.default, (int, float)) and lo is not None and fl.default < lo:
        default = ""  # a placeholder the spec replaces (its doc says with what)
    return Key(d.key or fl.name, typ, default, d.doc, choices, lo, hi, d.required)


def _default_text(value: Any, typ: str) -> str:
    """A typed default as a scenario would write it: bytes as a count (``32768B``: no unit to misread)."""
    if typ == "size" and isinstance(value, int):
        return f"{value}B"
    if typ == "duration":
        return f"{value:g}s"
    if typ == "size distribution":
        return ", ".join(f"{s}B" for s, _ in value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def job_groups() -> dict[str, tuple[str, ...]]:
    """The job kinds by the spec that reads them (the collectives share one, as do shortflows and incast):
    the first kind -> every kind of that spec."""
    groups: dict[type, list[str]] = {}
    for kind in KINDS:
        groups.setdefault(SPEC_OF[kind], []).append(kind)
    return {kinds[0]: tuple(kinds) for kinds in groups.values()}


def all_sections() -> dict[str, tuple[Key, ...]]:
    """Section name -> its keys: the declared sections, placement, and a ``job:KIND`` section per job spec
    (named by its first kind), whose ``kind`` takes that spec's kinds."""
    out = {**SECTIONS, "placement": _placement_keys()}
    for first, kinds in job_groups().items():
        keys = _job_keys(first)
        out[f"job:{first}"] = tuple(dataclasses.replace(k, choices=kinds) if k.key == "kind" else k for k in keys)
    return out


# --- Markdown ------------------------------------------------------------------------------------------------------


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _type_text(k: Key) -> str:
    if k.type.startswith(("section:", "list:")):
        kind, name = k.type.split(":")
        text = f"a mapping ({name})" if kind == "section" else f"a list of mappings ({name})"
    elif k.type == "choice":
        text = " \\| ".join(k.choices)
    else:
        text = k.type
        if k.lo is not None or k.hi is not None:
            lo = "" if k.lo is None else _num(k.lo)
            hi = "" if k.hi is None else _num(k.hi)
            if k.type not in ("integer", "number"):
                text += f" (at least {lo})"
            elif k.lo_open:
                text += f" above {lo}, at most {hi}" if hi else f" above {lo}"
            else:
                text += f" {lo}..{hi}"
    for other in k.also:
        text += f" or {other}"
    return text


def markdown() -> str:
    lines = [
        "# Scenario keys",
        "",
        f"Generated by `{COMMAND}` from the spec declarations (testbed/spec/keys.py, the jobs' `spec_field`s in",
        "testbed/spec/workload.py): do not edit by hand. The spec layer is the judge of a value: loading a scenario",
        "(`testbed validate FILE`) refuses an unknown key or an impossible value in one line naming the key.",
        "",
        "Units:",
        *[f"- {text}" for text in UNITS.values()],
        "",
        "A key marked **required** must be given; an empty default means none (the key is optional and off).",
    ]
    for name, keys in all_sections().items():
        if name.startswith("job:"):
            kinds = job_groups()[name.removeprefix("job:")]
            title, where = f"Job `kind: {'`, `'.join(kinds)}`", "workload[]"
        else:
            title, where = f"Section {name}", WHERE[name]
        lines += ["", f"## {title}", ""]
        lines += [f"Keys of: `{where}`." if where else "The scenario file's top-level keys.", ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for k in keys:
            key = f"`{k.key}`" + (" **required**" if k.required else "")
            doc = k.doc.replace("|", "\\|")
            lines.append(f"| {key} | {_type_text(k)} | {k.default} | {doc} |")
    return "\n".join(lines) + "\n"


# --- JSON Schema ---------------------------------------------------------------------------------------------------

_UNIT = {"type": ["string", "number"]}


def _schema_of(k: Key) -> dict[str, Any]:
    t = k.type
    if t.startswith("section:"):
        out: dict[str, Any] = {"$ref": f"#/$defs/{t.removeprefix('section:')}"}
    elif t.startswith("list:"):
        name = t.removeprefix("list:")
        out = {"type": "array", "items": {"$ref": f"#/$defs/{name}"}}
    elif t == "choice":
        out = {"enum": list(k.choices)}
    elif t in ("integer", "number"):
        out = {"type": t}
        if k.lo is not None:
            out["exclusiveMinimum" if k.lo_open else "minimum"] = k.lo
        if k.hi is not None:
            out["maximum"] = k.hi
    elif t in ("boolean", "string"):
        out = {"type": t}
    elif t in ("rate", "size", "duration", "ratio"):
        out = {**_UNIT, "description": UNITS[t]}
    elif t in ("hosts", "integers"):
        out = {"type": "array", "items": {"type": "string" if t == "hosts" else "integer"}}
    elif t == "sweep":
        out = {"type": "object", "additionalProperties": {"type": "array", "minItems": 1}}
    else:  # ranks, host pairs, size sweep, size distribution, rank groups, durations: shapes the parser checks
        out = {}
    if k.also:
        alts = [{"type": other} for other in k.also]
        out = {"anyOf": [out, *alts]}
    doc = k.doc + (f" (default {k.default})" if k.default else "")
    if doc:
        out["description"] = (out.get("description", "") + "; " if "description" in out else "") + doc
    return out


def _object(keys: tuple[Key, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "object",
        "properties": {k.key: _schema_of(k) for k in keys},
        "additionalProperties": False,
    }
    required = [k.key for k in keys if k.required]
    if required:
        out["required"] = required
    return out


def schema() -> dict[str, Any]:
    sections = all_sections()
    defs = {name.replace(":", "_"): _object(keys) for name, keys in sections.items() if name != "scenario"}
    defs["job"] = {
        "type": "object",
        "required": ["kind", "name"],
        "properties": {"kind": {"enum": list(KINDS)}},
        "allOf": [
            {"if": {"properties": {"kind": {"enum": list(kinds)}}}, "then": {"$ref": f"#/$defs/job_{first}"}}
            for first, kinds in job_groups().items()
        ],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "testbed scenario",
        "description": f"Generated by `{COMMAND}`; the spec layer (`testbed validate`) is the judge.",
        **_object(sections["scenario"]),
        "$defs": defs,
    }


def schema_text() -> str:
    return json.dumps(schema(), indent=2) + "\n"


def stale() -> list[Path]:
    """The generated files that differ from what the declarations generate now."""
    out = []
    for path, text in ((MARKDOWN, markdown()), (SCHEMA, schema_text())):
        if not path.is_file() or path.read_text() != text:
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale; write nothing")
    args = p.parse_args(argv)
    if args.check:
        bad = stale()
        for path in bad:
            print(f"{path.relative_to(REPO)} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if bad else 0
    MARKDOWN.write_text(markdown())
    SCHEMA.write_text(schema_text())
    print(f"wrote {MARKDOWN.relative_to(REPO)} and {SCHEMA.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
