"""Guest-kernel mode: run a testbed command inside a pinned stock kernel (virtme-ng + QEMU).

    python3 -m testbed vm [--kernel debian-6.1] [--timeout S] [--memory 2G] -- COMMAND...

Library: ``run_in_guest(argv, kernel=..., rwdirs=[...], timeout=...) -> GuestResult``; CLI: ``vm_main(argv)``.
"""

from testbed.vm.cli import vm_main
from testbed.vm.errors import GuestTimeout, GuestToolsMissing, KernelUnavailable, VmError
from testbed.vm.guest import GuestResult, run_in_guest
from testbed.vm.kernel import KernelImage, ensure_kernel
from testbed.vm.tools import ensure_guest_tools

__all__ = [
    "GuestResult",
    "GuestTimeout",
    "GuestToolsMissing",
    "KernelImage",
    "KernelUnavailable",
    "VmError",
    "ensure_guest_tools",
    "ensure_kernel",
    "run_in_guest",
    "vm_main",
]
