"""SQL of billing: the usage meter's hourly rows, storage samples, usage reports and invoices.

One statement per file in ``sql/``, by name: ``queries.NAME`` is ``sql/name.sql``
(:mod:`core.sql`).
"""

from core.sql import statements

__getattr__ = statements(__name__)
