"""Every scenario shown in README.md and docs/ loads: the spec layer validates it (every sweep point), no root.

A fenced ```yaml block is a scenario when it is a mapping with ``fabric:`` or ``workload:``; a block meant as a
partial example (a fragment of a scenario, e.g. only its ``sweep:``) is skipped when it has neither, or when the
line before its fence is ``<!-- fragment -->``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.spec.scenario import expand

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```ya?ml[ \t]*\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
FRAGMENT = "<!-- fragment -->"


def yaml_blocks(text: str) -> list[tuple[int, str, bool]]:
    """(line of the fence, the block's text, marked as a fragment) for every fenced YAML block."""
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").splitlines()
        indent = m.group("indent")
        body = "\n".join(line.removeprefix(indent) for line in m.group("body").splitlines())
        out.append((text[: m.start()].count("\n") + 1, body, bool(before) and before[-1].strip() == FRAGMENT))
    return out


def scenario_blocks() -> list[tuple[str, str]]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    out = []
    for doc in docs:
        for line, body, fragment in yaml_blocks(doc.read_text()):
            data = yaml.safe_load(body)
            if not fragment and isinstance(data, dict) and {"fabric", "workload"} & set(data):
                out.append((f"{doc.relative_to(REPO)}:{line}", body))
    return out


def test_the_blocks_are_found() -> None:
    text = "a\n```yaml\nname: x\n```\n<!-- fragment -->\n```yaml\nfabric: {}\n```\n  ```yml\n  k: 1\n  ```\n"
    assert yaml_blocks(text) == [(2, "name: x", False), (6, "fabric: {}", True), (9, "k: 1", False)]
    assert any(where.startswith("README.md:") for where, _ in scenario_blocks())  # the README's example


@pytest.mark.parametrize(("where", "body"), scenario_blocks(), ids=[w for w, _ in scenario_blocks()])
def test_every_scenario_in_the_docs_loads(where: str, body: str) -> None:
    data: Any = yaml.safe_load(body)
    data.setdefault("name", "doc-example")
    expand(data)  # raises a SpecError naming the key: fix the doc (or mark a partial example <!-- fragment -->)
