"""What the framework integrations share: calls, hooks, model calls, runs and the final answer."""
