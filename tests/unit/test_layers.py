"""The layer rule, read from the imports (module-level and function-level alike, no root).

Data flows one way (docs/architecture.md): a module may import its own layer and the layers below it, never one
above, and no chain of imports may come back to where it started. Importing ``a.b.c`` also runs ``a/__init__``
and ``a/b/__init__``, so a package's ``__init__`` counts as a module that every import of its children reaches.
A new module must be given a layer here; a new back-edge or cycle fails with the import that made it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "traffic", "results", "bench")

# Lowest first. A module's layer is that of the longest prefix listed.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("testbed", "testbed.errors")),
    ("spec", ("testbed.spec",)),
    ("host", ("testbed.host", "testbed.bpf", "testbed.ecn")),
    ("fabric", ("testbed.fabric",)),
    (
        "runtime",
        (
            "testbed.telemetry",
            "testbed.pfc",
            "testbed.failures",
            "traffic",
            "testbed.calibrate",
            "testbed.plan",
            "testbed.vm",
        ),
    ),
    ("results", ("results",)),
    (
        "top",
        (
            "testbed.run",
            "testbed.api",
            "testbed.fabric_counters",
            "testbed.cluster",
            "testbed.cli",
            "testbed.labcli",
            "testbed.labsheets",
            "testbed.__main__",
            "testbed.pytest_plugin",
            "testbed.machine",
            "testbed.validate",
            "bench",
        ),
    ),
)


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int
    function_level: bool

    def __str__(self) -> str:
        where = "function-level" if self.function_level else "module-level"
        return f"{self.src} -> {self.dst} ({where} import, line {self.line})"


def modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the packages under ``root``."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _targets(mods: dict[str, Path], cur: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The project modules an import statement loads (the names themselves when they are modules)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = cur.split(".") if mods[cur].name == "__init__.py" else cur.split(".")[:-1]
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    found = []
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name:
            found.append(name)
    return found


def edges(root: Path, packages: Iterable[str] = PACKAGES) -> list[Edge]:
    """Every import between two project modules, plus the package ``__init__`` files each one runs."""
    mods = modules(root, packages)
    out: set[Edge] = set()
    for cur, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for dst in _targets(mods, cur, node):
                chain = [dst]
                while "." in chain[-1]:
                    chain.append(chain[-1].rpartition(".")[0])
                for d in chain:  # the target and the packages above it that the import runs
                    if d in mods and d != cur and not cur.startswith(d + "."):
                        out.add(Edge(cur, d, node.lineno, id(node) not in top))
    return sorted(out, key=lambda e: (e.src, e.dst, e.line))


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[0]):
                best = (len(p), i)
    return None if best is None else best[1]


def back_edges(all_edges: Iterable[Edge]) -> list[str]:
    out = []
    for e in all_edges:
        a, b = layer_of(e.src), layer_of(e.dst)
        if a is not None and b is not None and b > a:
            out.append(f"{e}: layer {LAYERS[a][0]} imports layer {LAYERS[b][0]}")
    return out


def cycles(all_edges: Iterable[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each as a sorted list."""
    graph: dict[str, set[str]] = {}
    for e in all_edges:
        graph.setdefault(e.src, set()).add(e.dst)
        graph.setdefault(e.dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_layers_every_module_has_a_layer() -> None:
    missing = [m for m in modules(REPO) if layer_of(m) is None]
    assert not missing, f"give these modules a layer in tests/unit/test_layers.py LAYERS: {missing}"


def test_layers_no_import_goes_up() -> None:
    bad = back_edges(edges(REPO))
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_layers_no_import_cycle() -> None:
    all_edges = edges(REPO)
    found = cycles(all_edges)
    detail = [
        f"cycle {' <-> '.join(c)}: " + "; ".join(str(e) for e in all_edges if e.src in c and e.dst in c) for c in found
    ]
    assert not found, "\n".join(detail)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_layers_checker_sees_a_function_level_back_edge(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "testbed/__init__.py": "",
            "testbed/spec/__init__.py": "",
            "testbed/spec/link.py": "def f():\n    from results.record import Run\n",
            "results/__init__.py": "",
            "results/record.py": "from testbed.spec.link import f\n",
        },
    )
    found = edges(root, ("testbed", "results"))
    bad = back_edges(found)
    assert bad == [
        "testbed.spec.link -> results (function-level import, line 2): layer spec imports layer results",
        "testbed.spec.link -> results.record (function-level import, line 2): layer spec imports layer results",
    ]
    assert cycles(found) == [["results.record", "testbed.spec.link"]]


def test_layers_checker_sees_a_cycle_through_a_package_init(tmp_path: Path) -> None:
    """``a/__init__`` importing ``a.x``, and ``a.x`` importing ``b``, which imports ``a.y``: importing ``a.y`` runs
    ``a/__init__`` first, so the three form a cycle although no module names another twice."""
    root = _tree(
        tmp_path,
        {
            "testbed/__init__.py": "",
            "testbed/calibrate/__init__.py": "from testbed.calibrate.cli import main\n",
            "testbed/calibrate/cli.py": "from testbed.preflight.budget import check\n",
            "testbed/calibrate/cache.py": "",
            "testbed/preflight/__init__.py": "",
            "testbed/preflight/budget.py": "from testbed.calibrate.cache import load\n",
        },
    )
    (comp,) = cycles(edges(root, ("testbed",)))
    assert comp == ["testbed.calibrate", "testbed.calibrate.cli", "testbed.preflight.budget"]
