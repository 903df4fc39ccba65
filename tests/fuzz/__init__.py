"""Fuzzing: the properties every hostile input must keep, and a coverage-guided driver.

``checks`` holds the properties (shared with the Hypothesis tests in tests/unit),
``targets`` turns each into a function of one byte string, and
``python -m tests.fuzz`` runs them under atheris (libFuzzer) for `make fuzz-nightly`.
"""
