"""Runs: the run and its state, ``guard()``, budgets, ``ask``, exceptions and process-wide switches."""
