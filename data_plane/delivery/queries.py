"""SQL of delivery: pulls, leases, acks, redeliveries, dead-lettering and committed offsets.

One statement per file in ``sql/``, by name: ``queries.NAME`` is ``sql/name.sql``
(:mod:`core.sql`).
"""

from core.sql import statements

__getattr__ = statements(__name__)
