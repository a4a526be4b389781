# Makes the repo root importable (testbed, traffic, results) and loads the testbed's pytest plugin, so that
# `sudo pytest scenarios/` works from the repo root with Debian's /usr/bin/pytest.
pytest_plugins = ["testbed.pytest_plugin"]
