"""A baseline revision of this repository checked out beside the working tree, for side-by-side benchmarks.

``checkout(rev)`` is ``git worktree add --detach`` into a temporary directory, removed again (worktree and
directory) when the block ends, so a benchmark runs the same child script on both trees and leaves nothing behind.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class BaselineError(RuntimeError):
    """The baseline revision cannot be checked out (not a git checkout, unknown revision)."""


@contextmanager
def checkout(rev: str, repo: Path = REPO) -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="tb-baseline-"))
    tree = tmp / "tree"
    got = subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "--detach", "-q", str(tree), rev], capture_output=True, text=True
    )
    if got.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BaselineError(f"cannot check out {rev!r}: {got.stderr.strip() or got.stdout.strip()}")
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
