"""The layer rule, read from the imports (module-level and function-level alike, no root).

Data flows one way (docs/architecture.md): a module may import its own layer and the layers below it, never one
above, and no chain of imports may come back to where it started. Importing ``a.b.c`` also runs ``a/__init__``
and ``a/b/__init__``, so a package's ``__init__`` counts as a module that every import of its children reaches.
A new module must be given a layer here; a new back-edge or cycle fails with the import that made it.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "traffic", "results", "bench")

# Lowest first. A module's layer is that of the longest prefix listed. Each package of the runtime has its own place:
# spec -> host -> vm -> bpf -> ecn -> fabric and telemetry -> pfc and failures -> traffic -> calibrate -> plan ->
# results -> run -> cli.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("testbed", "testbed.errors", "testbed.entry")),
    ("spec", ("testbed.spec",)),
    # processes, ownership, sysctls and the host's capability trials
    ("host", ("testbed.host",)),
    # the guest-kernel mode: it boots a kernel and runs a command in it, asking only the host
    ("vm", ("testbed.vm",)),
    # the eBPF toolkit every loader shares: the build, libbpf, bpf(2), tc and bpftool in a namespace
    ("bpf", ("testbed.bpf",)),
    # ECN marking and congestion control, which the fabric installs on its ports
    ("ecn", ("testbed.ecn",)),
    # the built fabric, and the telemetry that reads it (neither imports the other)
    ("fabric", ("testbed.fabric", "testbed.telemetry")),
    # what acts on a built fabric while traffic runs: PFC's controller and the scheduled link events
    ("control", ("testbed.pfc", "testbed.failures")),
    # what runs on the hosts
    ("traffic", ("traffic",)),
    # this machine's measured costs (its trials run traffic on a fabric), and the machine as a run records it
    ("calibrate", ("testbed.calibrate", "testbed.machine")),
    # each point's plan and preflight, before anything is built (it reads the calibration)
    ("plan", ("testbed.plan",)),
    ("results", ("results",)),
    # the run lifecycle and what drives it: the Python API, the cluster, the pytest plugin, the benchmarks
    (
        "run",
        (
            "testbed.run",
            "testbed.api",
            "testbed.invocation",
            "testbed.cluster",
            "testbed.pytest_plugin",
            "bench",
        ),
    ),
    # the commands; ``testbed calibrate``'s own (cli, __main__) measures, shows the cache and, with --predict, asks
    # the plan for every point's load
    (
        "cli",
        (
            "testbed.cli",
            "testbed.__main__",
            "testbed.labcli",
            "testbed.labsheets",
            "testbed.validate",
            "testbed.calibrate.cli",
            "testbed.calibrate.__main__",
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


def order_failures(root: Path, packages: Iterable[str] = PACKAGES) -> str:
    """The layer test's failure message for the tree under ``root``: every import against the order, or ''."""
    bad = back_edges(edges(root, packages))
    return "imports against the layer order:\n" + "\n".join(bad) if bad else ""


def test_layers_no_import_goes_up() -> None:
    failure = order_failures(REPO)
    assert not failure, failure


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


def test_layers_checker_fails_on_a_deliberate_back_edge_inside_the_runtime(tmp_path: Path) -> None:
    """The host importing the fabric: the check fails, naming both modules and both layers."""
    root = _tree(
        tmp_path,
        {
            "testbed/__init__.py": "",
            "testbed/host/__init__.py": "",
            "testbed/host/procs.py": "import os\nfrom testbed.fabric.build import Fabric\n",
            "testbed/fabric/__init__.py": "",
            "testbed/fabric/build.py": "from testbed.host.procs import ProcessGroup\n",
        },
    )
    assert order_failures(root, ("testbed",)) == (
        "imports against the layer order:\n"
        "testbed.host.procs -> testbed.fabric (module-level import, line 2): layer host imports layer fabric\n"
        "testbed.host.procs -> testbed.fabric.build (module-level import, line 2): layer host imports layer fabric"
    )


RUNTIME = [(name, prefixes[0]) for name, prefixes in LAYERS[LAYERS.index(("spec", ("testbed.spec",))) :]]


@pytest.mark.parametrize(("lower", "upper"), list(itertools.pairwise(RUNTIME)), ids=lambda x: x[0])
def test_layers_each_package_sits_below_the_next(
    tmp_path: Path, lower: tuple[str, str], upper: tuple[str, str]
) -> None:
    """An import from each layer into the next one up fails: the layers are ordered, not a set."""
    (low, low_pkg), (up, up_pkg) = lower, upper
    root = _tree(
        tmp_path,
        {
            low_pkg.replace(".", "/") + "/low.py": f"from {up_pkg}.up import x\n",
            up_pkg.replace(".", "/") + "/up.py": f"from {low_pkg}.low import y\n",
        },
    )
    packages = sorted({low_pkg.split(".")[0], up_pkg.split(".")[0]})
    assert back_edges(edges(root, packages)) == [
        f"{low_pkg}.low -> {up_pkg}.up (module-level import, line 1): layer {low} imports layer {up}"
    ]


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
