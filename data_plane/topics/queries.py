"""SQL of topics: their rows and partitions, and the dashboard's read models of them.

One statement per file in ``sql/``, by name: ``queries.NAME`` is ``sql/name.sql``
(:mod:`core.sql`).
"""

from core.sql import statements

__getattr__ = statements(__name__)
