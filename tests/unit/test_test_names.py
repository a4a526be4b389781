"""Test files need unique basenames: pytest imports tests/ and scenarios/ as rootdir-relative modules by basename
(no __init__.py), so two test_x.py in different folders stop the whole collection. It happened twice: CI18
(test_cluster.py) and CI23 (test_spray.py in tests/root and scenarios/)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_file_has_its_own_basename() -> None:
    files = [p for d in ("tests", "scenarios") for p in (ROOT / d).rglob("test_*.py") if "__pycache__" not in p.parts]
    twice = {name: n for name, n in Counter(p.name for p in files).items() if n > 1}
    assert not twice, {name: sorted(str(p.relative_to(ROOT)) for p in files if p.name == name) for name in twice}


def test_no_helper_is_named_like_a_test() -> None:
    """pytest collects every module-level function whose name starts with ``test`` (``testbed`` too) and calls it
    as a test: a helper so named runs once with its own arguments unfilled. Tests are named ``test_...``."""
    files = [p for d in ("tests", "scenarios") for p in (ROOT / d).rglob("test_*.py") if "__pycache__" not in p.parts]
    odd = [
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"
        for p in files
        for node in ast.parse(p.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test") and not node.name.startswith("test_")
    ]
    assert not odd, odd
