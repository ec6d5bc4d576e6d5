"""The HTTP edge every request passes: ids, limits, authentication, errors, tracing, drain."""
