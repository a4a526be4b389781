"""What a process takes from its entry's environment, read once where it starts (the CLI, the API, the pytest
plugin, a cluster worker's point, the benchmarks): where runs lock and keep their state (``TESTBED_STATE_DIR``)
and the user sudo ran it for, who gets the records it writes (``SUDO_UID``, ``SUDO_GID``). Below the entries, no
module reads the environment for these."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from results.handover import use_invoker
from testbed.host.ownership import use_state_dir


def enter(env: Mapping[str, str]) -> Path:
    """Settle this process's state directory and records' owner from ``env``; the state directory."""
    use_invoker(env)
    return use_state_dir(env)
