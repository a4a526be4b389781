"""Benchmarks that print figures (``python3 -m testbed bench``); see docs/bench.md."""
