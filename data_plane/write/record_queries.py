"""SQL of Kafka record appends beside the write path: one statement per file in ``sql/``."""

from core.sql import statements

__getattr__ = statements(__name__)
