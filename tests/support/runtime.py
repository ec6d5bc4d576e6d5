"""Reach an in-process app's data plane from a test, through the dependency handlers get."""

from __future__ import annotations

from typing import Any

from litestar import Litestar

from data_plane.service import DataPlane


def data_plane_of(app: Litestar) -> DataPlane:
    """The running data plane that handlers of ``app`` receive (its lifespan must have begun)."""
    provider: Any = app.dependencies["data_plane"]
    plane: DataPlane = provider.dependency()
    return plane
