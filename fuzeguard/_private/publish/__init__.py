"""What a run publishes: events, the standard sinks, hooks, the log, OpenTelemetry and traces."""
