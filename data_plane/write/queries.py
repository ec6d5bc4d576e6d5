"""SQL of the write path that is not part of the commit (``qc_commit_flush``)."""

from __future__ import annotations

PROJECT_OF_ENVIRONMENT = "SELECT project_id FROM environments WHERE id = %(environment_id)s"
