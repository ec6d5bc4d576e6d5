"""Logging, tracing and metrics set-up, and OTLP export to GreptimeDB."""
