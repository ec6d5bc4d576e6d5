"""SQL of dead letters: inspect and replay, alert endpoints, alerts and their webhook outbox.

One statement per file in ``sql/``, by name: ``queries.NAME`` is ``sql/name.sql``
(:mod:`core.sql`).
"""

from core.sql import statements

__getattr__ = statements(__name__)
