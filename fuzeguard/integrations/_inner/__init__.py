"""Agents a tool runs inside an outer agent: how each framework's integration reaches them."""
