"""Lua hooks (Fila's): a topic's ``onEnqueue`` sets a message's fairness key, weight and throttle
keys; a group's ``onFailure`` decides between a retry and the dead-letter queue. Sandboxed,
budgeted, compiled when saved; a failing hook is counted and logged, and the defaults apply."""
