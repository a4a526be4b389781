"""The root of the project's own errors.

Every error the harness raises on purpose (a bad scenario, a missing capability, a failed build or command, a
busy machine) derives from ``TestbedError`` besides its builtin base. The CLI prints these as one line; anything
else is a bug and shows its traceback.
"""

from __future__ import annotations


class TestbedError(Exception):
    """An error the harness raises on purpose, with a message meant for the user."""

    __test__ = False  # not a pytest test class, despite the name
