"""SQL of push groups: settings, the pushers' targets, failed pushes.

One statement per file in ``sql/``, by name: ``queries.NAME`` is ``sql/name.sql``
(:mod:`core.sql`).
"""

from core.sql import statements

__getattr__ = statements(__name__)
