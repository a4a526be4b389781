"""The machine a point is planned and run on, as one value: what it can do (the capability probe, with the CPU
cost calibration's status) and the context it runs in (inside the guest-kernel mode or not, and how; a CPU budget
the user set). Built once at the entry (``testbed.machine.here``: the CLI, the API, the pytest plugin) from the
probe and the process's environment, and passed down: nothing below the entry reads the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from testbed.host.capabilities import Capabilities

GUEST_PREFIX = "TESTBED_GUEST"  # TESTBED_GUEST=1 inside `testbed vm`, TESTBED_GUEST_ACCEL=kvm|tcg, ...
CPU_BUDGET_ENV = "TESTBED_CPU_BUDGET"  # the share of the machine a point may use (0.75 or 75%)


@dataclass(frozen=True)
class Machine:
    """``caps``: the probe's capabilities (``caps.calibration``: the calibration's status). ``guest``: this
    process's ``TESTBED_GUEST*`` settings (empty outside the guest-kernel mode). ``cpu_budget``: the user's
    ``TESTBED_CPU_BUDGET`` as given (empty: the built-in budget)."""

    caps: Capabilities
    guest: Mapping[str, str] = field(default_factory=dict, hash=False)
    cpu_budget: str = ""

    @classmethod
    def from_env(cls, caps: Capabilities, env: Mapping[str, str]) -> Machine:
        """The machine with the context that ``env`` (the entry's environment) gives."""
        guest = {k: v for k, v in env.items() if k.startswith(GUEST_PREFIX)}
        return cls(caps, guest, env.get(CPU_BUDGET_ENV, ""))

    @property
    def in_guest(self) -> bool:
        """Inside the guest-kernel mode (``testbed vm``)."""
        return bool(self.guest.get(GUEST_PREFIX))

    @property
    def env(self) -> dict[str, str]:
        """The context as the environment variables that give it (what the guest-fit and budget readers take)."""
        return {**self.guest, **({CPU_BUDGET_ENV: self.cpu_budget} if self.cpu_budget else {})}
