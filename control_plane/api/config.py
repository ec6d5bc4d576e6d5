"""``/v1/config``: the environment's runtime configuration (reads: any key; writes: ``admin``)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, put
from litestar.di import NamedDependency
from litestar.params import Body, FromPath, QueryParameter

from control_plane.edge.auth import auth_context
from data_plane.service import ConfigEntry, ConfigList, ConfigValue, DataPlane


class ConfigController(Controller):
    """Set, read, list and delete keys; ``throttle.<key>.rate`` and ``throttle.<key>.burst``
    are the throttle keys' token buckets, seen by every replica within seconds."""

    path = "/config"
    tags = ["runtime configuration"]
    opt = {"rate": "admin"}  # reads: any scope; writes: admin

    @get("/", summary="List the runtime configuration, optionally by key prefix")
    async def list_entries(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        prefix: Annotated[
            str, QueryParameter(max_length=200, description="only keys starting with this")
        ] = "",
    ) -> ConfigList:
        """Entries by key, and how many match."""
        return await data_plane.config.list_all(auth_context(request), prefix)

    @get("/{config_key:str}", summary="Read a runtime configuration key")
    async def get_entry(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        config_key: FromPath[str],
    ) -> ConfigEntry:
        """404 ``CONFIG_KEY_NOT_FOUND`` when it is not set."""
        return await data_plane.config.get(auth_context(request), config_key)

    @put("/{config_key:str}", summary="Set a runtime configuration key", opt={"scope": "admin"})
    async def put_entry(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        config_key: FromPath[str],
        data: Annotated[ConfigValue, Body()],
    ) -> ConfigEntry:
        """Created or replaced; throttle rates and bursts must be numbers ≥ 0 (422)."""
        return await data_plane.config.put(auth_context(request), config_key, data.value)

    @delete(
        "/{config_key:str}", summary="Delete a runtime configuration key", opt={"scope": "admin"}
    )
    async def delete_entry(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        config_key: FromPath[str],
    ) -> None:
        """404 ``CONFIG_KEY_NOT_FOUND`` when it is not set."""
        await data_plane.config.delete(auth_context(request), config_key)
