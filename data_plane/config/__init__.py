"""Runtime configuration: a persisted key-value store per environment (Fila's ``SetConfig``),
read by every replica through a short cache, e.g. ``throttle.<key>.rate``."""
