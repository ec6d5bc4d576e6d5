"""SQL read by the GreptimeDB series task: consumers and hourly usage, with tenant names.

One statement per file in ``sql/``, by name: ``queries.NAME`` is ``sql/name.sql``
(:mod:`core.sql`).
"""

from core.sql import statements

__getattr__ = statements(__name__)
