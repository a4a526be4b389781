"""`python3 -m testbed COMMAND`: see `python3 -m testbed --help`."""

from testbed.cli import main

raise SystemExit(main())
