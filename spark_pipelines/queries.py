"""SQL of the Spark jobs and their scheduling tasks: compaction, lag analytics, usage roll-ups.

One statement per file in ``sql/``, by name: ``queries.NAME`` is ``sql/name.sql``
(:mod:`core.sql`).
"""

from core.sql import statements

__getattr__ = statements(__name__)
