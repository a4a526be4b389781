"""Why a guest run could not happen; each message is one line a user can act on."""

from __future__ import annotations

from testbed.errors import TestbedError


class VmError(TestbedError):
    """A guest run failed before or around the command (not the command's own failure: that is its rc)."""

    exit_code = 2


class KernelUnavailable(VmError):
    """The kernel package cannot be resolved, fetched or unpacked."""


class GuestToolsMissing(VmError):
    """QEMU, virtme-ng, busybox or udev is missing and could not be installed."""


class GuestTimeout(VmError):
    """The guest did not finish in time; its QEMU process group was killed."""

    exit_code = 124

    def __init__(self, message: str, sid: int = 0) -> None:
        super().__init__(message)
        self.sid = sid  # the session id of the killed vng/QEMU processes (for checks that none is left)
