"""The testbed as a pytest plugin: fixtures that yield a built fabric and always tear it down.

    def test_x(fabric_factory):
        fab = fabric_factory({"spines": 2, "leaves": 2, "hosts_per_leaf": 1})
        ...

Root-only tests are marked ``@pytest.mark.root``; without root they are skipped with the reason.
``bench_lock`` serializes measurements so that two never share the machine's cores.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

BENCH_LOCK = Path("/run/testbed-bench.lock")


def pytest_configure(config: pytest.Config) -> None:
    """Where the tests' runs lock and keep their state: the session's environment, read once (as the CLI does)."""
    from testbed.invocation import enter

    enter(os.environ)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: builds network namespaces and shapes links (run with sudo)")
    for item in items:
        if "root" in item.keywords or "stock_kernel" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def bench_lock() -> Iterator[None]:
    """Hold the machine-wide measurement lock for the test's duration."""
    fd = os.open(BENCH_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@pytest.fixture
def fabric_factory() -> Iterator[Callable[..., Any]]:
    """Build fabrics from fabric-section dicts (or FabricSpec); every one is torn down after the test."""
    from testbed.fabric.build import Fabric
    from testbed.spec.fabric import FabricSpec

    built: list[Fabric] = []

    def make(spec: dict[str, Any] | FabricSpec, lock_wait: float = 600.0) -> Fabric:
        fspec = spec if isinstance(spec, FabricSpec) else FabricSpec.from_dict(spec)
        fab = Fabric(fspec, lock_wait=lock_wait)
        fab.build()
        built.append(fab)
        return fab

    try:
        yield make
    finally:
        errors = []
        for fab in reversed(built):
            try:
                fab.teardown()
            except Exception as exc:
                errors.append(str(exc))
        if errors:
            raise RuntimeError("; ".join(errors))
