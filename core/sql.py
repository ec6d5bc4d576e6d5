"""SQL statements kept as files: one statement per ``.sql`` file in the ``sql/`` folder beside the
package that owns it, loaded by name.

A package's ``queries`` module is two lines (``__getattr__ = core.sql.statements(__name__)``);
``queries.ACK_RANGES`` then reads ``sql/ack_ranges.sql`` once and keeps it as a plain module
attribute, so the next access costs what a constant did. Full-line ``--`` comments (the why of a
statement) stay in the file and are not sent: a statement's text is what PostgreSQL shows in
``pg_stat_activity``, where one statement looks for another by its text.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import resources

FOLDER = "sql"
SUFFIX = ".sql"


def read(package: str, name: str, folder: str = FOLDER, suffix: str = SUFFIX) -> str:
    """The text of ``<package>/<folder>/<name><suffix>`` (installed, zipped or in a checkout)."""
    return resources.files(package).joinpath(folder, name + suffix).read_text(encoding="utf-8")


def statement(text: str) -> str:
    """A statement file's SQL: without its full-line comments and surrounding blank space."""
    kept = (line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return "\n".join(kept).strip() + "\n"


def statements(module: str) -> Callable[[str], str]:
    """A module ``__getattr__`` serving the statements of the module's package by upper-case
    name (``COMMIT_FLUSH`` is ``sql/commit_flush.sql``), each read on first use and then kept."""
    package = module.rpartition(".")[0] or module

    def load(name: str) -> str:
        if not name.isupper():
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        try:
            text = statement(read(package, name.lower()))
        except FileNotFoundError:
            raise AttributeError(f"{module}: no statement {name} ({package}/sql/)") from None
        setattr(sys.modules[module], name, text)
        return text

    return load
