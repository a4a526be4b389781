"""One registry of plot styles: each variant keeps the same label, colour and marker in every figure.

Styles are handed out in the order variants are registered (the comparison's row order), so one report is
consistent across all its figures and the same sweep gives the same colours every time. A row of runs that did
not complete ("buffer=50KB [incomplete]") shares its variant's colour, drawn dotted with hollow markers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# matplotlib's tab10, written out so the registry does not depend on the global rc state
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


@dataclass(frozen=True)
class Style:
    label: str
    color: str
    marker: str
    linestyle: str = "-"
    hollow: bool = False

    def line(self) -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot``/``step``."""
        kw: dict[str, Any] = {"label": self.label, "color": self.color, "linestyle": self.linestyle}
        return kw

    def bar(self) -> dict[str, Any]:
        """Keyword arguments for ``Axes.bar``."""
        return {
            "label": self.label,
            "color": "white" if self.hollow else self.color,
            "edgecolor": self.color,
            "hatch": "//" if self.hollow else None,
        }


def base_variant(label: str) -> str:
    return label.split(" [", 1)[0]


class StyleRegistry:
    def __init__(self, labels: Iterable[str] = ()):
        self._styles: dict[str, Style] = {}
        self._bases: dict[str, int] = {}
        for label in labels:
            self.style(label)

    def style(self, label: str) -> Style:
        if label not in self._styles:
            base = base_variant(label)
            idx = self._bases.setdefault(base, len(self._bases))
            hollow = base != label
            self._styles[label] = Style(
                label,
                PALETTE[idx % len(PALETTE)],
                MARKERS[idx % len(MARKERS)],
                ":" if hollow else "-" if idx < len(PALETTE) else "--",
                hollow,
            )
        return self._styles[label]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._styles.values())

    def __len__(self) -> int:
        return len(self._styles)
