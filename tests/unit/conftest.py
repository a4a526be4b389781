"""Fixtures shared by the unit tests."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

RECORDS_ARCHIVE = Path(__file__).resolve().parents[1] / "data" / "records.tar.xz"


@pytest.fixture(scope="session")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The stored fixture records (tests/data/records.tar.xz), unpacked once per session: one directory each."""
    root = tmp_path_factory.mktemp("fixtures")
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Debian 12's 3.11.2 has no filters
    with tarfile.open(RECORDS_ARCHIVE) as tar:
        tar.extractall(root, **safe)  # type: ignore[arg-type]
    return sorted((root / "records").iterdir())
