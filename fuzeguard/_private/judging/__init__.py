"""Judging a call: the plan, the layer protocol, the decision core, completion and watching."""
