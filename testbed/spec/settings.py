"""``--set KEY=VALUE`` on the command line: one scenario key changed for this invocation, the file left as it is.

``KEY`` is a dotted key path as a sweep axis names one (``fabric.host_link.rate``; a number indexes a list,
``workload.0.size``); ``VALUE`` is read as YAML (``50Mbit``, ``[off, {mode: step, k: 30KB}]``, ``null``).
``sweep.AXIS`` sets one sweep axis whole (``--set sweep.fabric.host_link.rate=[50Mbit,100Mbit]``), and
``sweep=null`` drops the sweep. A key a sweep axis also sets is refused: the sweep would overwrite it at every
point. An error the scenario layer raises at a key a ``--set`` changed names that ``--set``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from testbed.spec.fields import SpecError

KEY_RE = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


@dataclass(frozen=True)
class Setting:
    """One ``--set``: the dotted ``key``, its ``value`` as YAML read it, and the ``text`` as given."""

    key: str
    value: Any
    text: str

    def __str__(self) -> str:
        return f"--set {self.text}"


def parse_setting(text: str) -> Setting:
    """``KEY=VALUE`` -> a Setting; a malformed one is a SpecError naming the ``--set``."""
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not KEY_RE.fullmatch(key):
        raise SpecError(
            f"--set {text}", "expected KEY=VALUE with KEY a dotted key path, e.g. fabric.host_link.rate=50Mbit"
        )
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"--set {text}", f"the value is not YAML: {problem}") from None
    return Setting(key, value, text)


def parse_settings(texts: Iterable[str] | None) -> tuple[Setting, ...]:
    return tuple(parse_setting(t) for t in texts or ())


def _dotted(path: str) -> str:
    """An error's key path in a ``--set`` key's spelling: ``workload[0].size`` -> ``workload.0.size``."""
    return re.sub(r"\[([^\]]*)\]", r".\1", path).strip(".")


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def check_against_sweep(settings: Sequence[Setting], sweep: Any) -> None:
    """Refuse a ``--set`` of a key a sweep axis sets (the axis would overwrite it at every point)."""
    if not isinstance(sweep, dict):
        return
    for s in settings:
        for axis in sweep:
            if isinstance(axis, str) and _related(s.key, axis):
                raise SpecError(
                    str(s), f"the sweep sets {axis} at every point; set the axis instead: --set sweep.{axis}=[...]"
                )


def naming_setting(exc: SpecError, settings: Sequence[Setting]) -> SpecError:
    """``exc`` with the ``--set`` it comes from named (the one whose key it is at, or above or below); when none
    matches, every ``--set`` is listed, since one can make another key's value wrong (``fabric.scale``)."""
    if not settings or exc.path.startswith("--set "):
        return exc
    where = _dotted(exc.path)
    hit = [s for s in settings if _related(s.key.removeprefix("sweep."), where) or _related(s.key, where)]
    if hit:
        return SpecError(exc.path, f"{exc.reason} (from {hit[0]})")
    return SpecError(exc.path, f"{exc.reason} (with {', '.join(str(s) for s in settings)})")
