"""Benchmarks run as scripts (``python -m benchmarks.publish``), never as tests."""
