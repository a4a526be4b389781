"""``python3 -m testbed.calibrate``: the same as ``python3 -m testbed calibrate``."""

import sys

from testbed.calibrate.cli import main

sys.exit(main())
