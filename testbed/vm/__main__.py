"""``python3 -m testbed.vm -- COMMAND...`` (the same as ``python3 -m testbed vm``)."""

import sys

from testbed.vm.cli import vm_main

sys.exit(vm_main(sys.argv[1:]))
