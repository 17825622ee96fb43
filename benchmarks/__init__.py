"""Benchmarks: measurements of the testbed itself, each a module run from
the repository root with the checkout's venv (`.venv/bin/python -m
benchmarks.NAME`), so this checkout's testbed is the one measured."""
