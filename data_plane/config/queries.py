"""SQL of runtime configuration: one statement per file in ``sql/`` (:mod:`core.sql`)."""

from core.sql import statements

__getattr__ = statements(__name__)
