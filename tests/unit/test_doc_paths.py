"""Every repository path the docs and the code's docstrings and comments cite exists; none cites what lies outside.

What is read: README.md, CONTRIBUTING.md and docs/**/*.md whole; the docstrings (module, class, function) and
comments of every Python file under the code's folders; scenario and test YAML files, setup.sh and .ci/run whole.

What counts as a cited path, by rule:

- A repository path: a token that starts with one of the repository's top-level folders (``TOPS``) followed by
  ``/``, e.g. ``testbed/spec/units.py`` or ``docs/labs/``; it must be a tracked file or folder. Run outputs
  (``runs/...``, ``build/...``, ``reports/...``) do not start with a top-level folder of the repository, so they
  are not paths here. A path that is not tracked may still be read one of two ways. A placeholder component (one
  holding ``<``, ``{`` or ``*``, or an all-capitals word such as ``RUN_DIR``, ``SHEET`` or ``X``) ends what is
  checked: ``scenarios/<name>.yaml`` checks ``scenarios/``, and ``docs/labs/*.md`` must match a tracked file. And
  ``folder/module.name`` names a function, class or constant defined in ``folder/module.py``.
- A file name in backticks, without a folder (``\\`sampler.py\\```): a source or doc file (``NAME_EXTS``) must be
  the name of a tracked file, or a file the code writes (a run's or a report's output: the name appears as a
  string in the packages' code, e.g. ``comparison.md``). A name with an all-capitals word is a placeholder.
- A Markdown link's target: relative to the document's folder, unless it is a URL.

What is refused: citations of what is not in the repository: the project's brief files and issue numbers
(``OUTSIDE``). Code and docs say the thing itself, or point at a file here.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOPS = ("testbed", "traffic", "results", "scenarios", "tests", "docs", "bench", ".ci")
CODE = ("testbed", "traffic", "results", "bench", "scenarios", "tests", ".ci")
PACKAGES = ("testbed", "traffic", "results")  # the code whose string literals name what a run or report writes
NAME_EXTS = ("py", "md", "yaml", "yml", "sh", "toml")
_PATH_CHARS = r"[\w./<>{}*?-]"
PATH_TOKEN = re.compile(rf"(?<!{_PATH_CHARS})(?:{'|'.join(re.escape(t) for t in TOPS)})/{_PATH_CHARS}*")
BACKTICKED_NAME = re.compile(rf"`{{1,2}}([\w.<>{{}}*-]+\.(?:{'|'.join(NAME_EXTS)}))`{{1,2}}")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[<{*?]|(?<![A-Za-z0-9])[A-Z][A-Z0-9_]*(?![a-z0-9])")
OUTSIDE = re.compile(r"\b(?:machine|mission|style)\.md\b|\bbrief/|\bissues? #?\d+\b", re.IGNORECASE)


def _git(*args: str) -> list[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.split("\0")


@cache
def tracked() -> frozenset[str]:
    """The repository's files (committed or staged, and still on disk)."""
    names = set(_git("ls-files", "-z")) | set(_git("ls-tree", "-r", "-z", "--name-only", "HEAD"))
    return frozenset(p for p in names if p and (REPO / p).exists())


@cache
def folders() -> frozenset[str]:
    return frozenset(str(Path(p).parents[i]) for p in tracked() for i in range(len(Path(p).parents) - 1))


@cache
def written_names() -> frozenset[str]:
    """Every bare file name the packages' code holds as a string: the files a run or a report writes."""
    names = set()
    for f in tracked():
        if f.endswith(".py") and f.split("/")[0] in PACKAGES:
            for node in ast.walk(ast.parse((REPO / f).read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and "/" not in node.value:
                    names.add(node.value)
    return frozenset(names)


def sources() -> list[str]:
    docs = [
        f for f in tracked() if f in ("README.md", "CONTRIBUTING.md") or (f.startswith("docs/") and f.endswith(".md"))
    ]
    code = [
        f
        for f in tracked()
        if f.split("/")[0] in CODE
        and (f.endswith((".py", ".yaml", ".yml")) or (f.startswith(".ci/") and "." not in Path(f).name))
    ]
    return sorted(docs + code + ["setup.sh"])


def passages(path: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of what is read in ``path``: a Python file's docstrings and comments, any other whole."""
    text = (REPO / path).read_text()
    if not path.endswith(".py"):
        yield 1, text
        return
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def at(path: str, first: int, text: str, pos: int) -> str:
    return f"{path}:{first + text.count(chr(10), 0, pos)}"


def path_missing(token: str) -> bool:
    """Whether a repository path token names nothing tracked (its placeholders and globs read as above)."""
    parts = token.rstrip(".,:;").rstrip("/").split("/")
    if "/".join(parts) in tracked() | folders():
        return False
    module, _, name = parts[-1].partition(".")
    source = "/".join([*parts[:-1], module + ".py"])
    if name.isidentifier() and source in tracked():
        defined = rf"^(?:\s*(?:async\s+)?(?:def|class)\s+{name}\b|{name}\s*[:=])"
        return not re.search(defined, (REPO / source).read_text(), re.MULTILINE)
    for i, part in enumerate(parts):
        if "*" in part or "?" in part:
            pattern = "/".join(parts[: i + 1])
            return not any(fnmatch.fnmatch(f, pattern) or fnmatch.fnmatch(f, pattern + "/*") for f in tracked())
        if PLACEHOLDER.search(part):
            parts = parts[:i]
            break
    path = "/".join(parts)
    return path not in tracked() and path not in folders()


def missing_citations() -> list[str]:
    bad = []
    names = {Path(f).name for f in tracked()}
    for src in sources():
        for first, text in passages(src):
            for m in PATH_TOKEN.finditer(text):
                if path_missing(m.group(0)):
                    bad.append(
                        f"{at(src, first, text, m.start())}: {m.group(0).rstrip('.,:;')} is not in the repository"
                    )
            for m in BACKTICKED_NAME.finditer(text):
                name = m.group(1)
                if name in names or name in written_names() or PLACEHOLDER.search(name.rsplit(".", 1)[0]):
                    continue
                bad.append(f"{at(src, first, text, m.start())}: `{name}` is no file of the repository")
            if src.endswith(".md"):
                for m in MD_LINK.finditer(text):
                    target = m.group(1).split("#")[0]
                    if not target or re.match(r"^[a-z][a-z+.-]*:", target):
                        continue
                    rel = (REPO / src).parent.joinpath(target).resolve()
                    if not rel.is_relative_to(REPO) or path_missing(str(rel.relative_to(REPO))):
                        bad.append(f"{at(src, first, text, m.start())}: link to {target}, which is not there")
    return bad


def outside_citations() -> list[str]:
    return [
        f"{at(src, first, text, m.start())}: cites {m.group(0)!r}, which is not in the repository"
        for src in sources()
        for first, text in passages(src)
        for m in OUTSIDE.finditer(text)
    ]


def test_every_cited_path_exists() -> None:
    bad = missing_citations()
    assert not bad, "\n".join(bad)


def test_nothing_outside_the_repository_is_cited() -> None:
    bad = outside_citations()
    assert not bad, "\n".join(bad)


def test_the_rules_on_known_tokens() -> None:
    assert not path_missing("testbed/spec/units.py") and not path_missing("docs/labs/")
    assert path_missing("scenarios/no_such_sweep.yaml") and path_missing("tests/root/no_such_test.py")
    assert not path_missing("scenarios/<name>.yaml") and not path_missing("docs/labs/SHEET.md")
    assert not path_missing("scenarios/*.yaml") and path_missing("scenarios/*.nothing")
    assert path_missing("nowhere/<name>.yaml")  # the part before a placeholder must exist
    assert not path_missing("bench/benchnet.line_net") and path_missing("bench/benchnet.no_such_function")
    assert path_missing("bench/benchnet.yaml")  # not a name benchnet.py defines
    assert [m.group(0) for m in PATH_TOKEN.finditer("runs/scenarios/x and `tests/unit/` or a/testbed/b")] == [
        "tests/unit/"
    ]  # a run output, and a path that does not start at the repository's top, are no repository paths
    assert "comparison.md" in written_names()  # a report's output
    brief = "machine" + ".md"
    assert OUTSIDE.search(f"see {brief}") and OUTSIDE.search("Traffic classes (issue 18)")
    assert not OUTSIDE.search("results/style.py, the comparisons issue")
