"""SQL of classic (Kafka protocol) consumer groups: one statement per file in ``sql/``."""

from core.sql import statements

__getattr__ = statements(__name__)
