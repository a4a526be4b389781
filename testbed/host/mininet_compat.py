"""Import Debian's Mininet 2.3.0 on any Python 3.

Mininet 2.3.0 imports ``distutils.version.StrictVersion`` (only to compare Open vSwitch versions), and distutils
is gone from Python 3.12 (Ubuntu 24.04). Where it is missing we provide that one class from a minimal shim, so
the import works; nothing in this project uses Open vSwitch through it.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _StrictVersion:
    def __init__(self, text: str):
        self.parts = tuple(int(x) for x in text.split(".") if x.isdigit())

    def __lt__(self, other: Any) -> bool:
        return self.parts < (other.parts if isinstance(other, _StrictVersion) else _StrictVersion(str(other)).parts)

    def __ge__(self, other: Any) -> bool:
        return not self < other


def import_mininet() -> types.ModuleType:
    """Return the mininet package; raise ImportError with how to install it."""
    try:
        import distutils.version  # noqa: F401
    except ImportError:
        shim = types.ModuleType("distutils")
        version = types.ModuleType("distutils.version")
        version.StrictVersion = _StrictVersion  # type: ignore[attr-defined]
        shim.version = version  # type: ignore[attr-defined]
        sys.modules.setdefault("distutils", shim)
        sys.modules.setdefault("distutils.version", version)
    try:
        import mininet.net
        import mininet.node
    except ImportError as exc:
        raise ImportError(
            f"Mininet is not importable from {sys.executable} ({exc}); install Debian's package: apt install mininet, "
            "and run with /usr/bin/python3"
        ) from exc
    import mininet

    return mininet
