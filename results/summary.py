"""The summary being built from a run's tables: every metric module writes into one ``Summary``."""

from __future__ import annotations

from typing import Any


class Summary(dict):  # type: ignore[type-arg]
    """The summary being built: ``put`` a value or ``na`` a reason."""

    def __init__(self) -> None:
        super().__init__()
        self["not_applicable"] = {}

    def put(self, name: str, value: Any) -> None:
        self[name] = value

    def na(self, name: str, reason: str) -> None:
        self[name] = None
        self["not_applicable"][name] = reason
