"""Property-based tests (Hypothesis): attacks generated from the code's own declarations, invariants checked.

``declarations.py`` turns what the code declares (the config's keys and ranges, the design space's limits, the
run folder's file kinds, every tool's arguments) into strategies, so a new key, file kind or argument is
attacked without anyone writing its test. ``conftest.py`` chooses how many examples run: a fixed,
derandomized few under ``make test``, as many as asked under ``make fuzz`` (docs/contributing.md).
"""
