"""SQL of the write path: the flush commit (``qc_commit_flush``) and its lookups.

One statement per file in ``sql/``, by name: ``queries.NAME`` is ``sql/name.sql``
(:mod:`core.sql`).
"""

from core.sql import statements

__getattr__ = statements(__name__)
