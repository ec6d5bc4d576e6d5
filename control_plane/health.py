"""Liveness and readiness probes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency

from control_plane.errors import error_response
from control_plane.resources import Resources

CHECK_TIMEOUT_S = 3.0


class HealthController(Controller):
    """``/healthz`` (process alive) and ``/readyz`` (PostgreSQL, S3 and Redis reachable)."""

    include_in_schema = True
    tags = ["health"]

    @get("/healthz", summary="Liveness: the process is serving requests")
    async def healthz(self) -> dict[str, str]:
        """Always ``ok`` while the process can answer."""
        return {"status": "ok"}

    @get("/readyz", summary="Readiness: PostgreSQL, S3 and Redis are reachable")
    async def readyz(
        self, request: Request[Any, Any, Any], resources: NamedDependency[Resources]
    ) -> Response[dict[str, Any]]:
        """200 when every dependency answers, else 503 naming what does not."""
        checks = await run_checks(resources)
        failing = sorted(name for name, result in checks.items() if result != "ok")
        if not failing:
            return Response({"status": "ready", "checks": checks})
        detail = "; ".join(f"{name}: {checks[name]}" for name in failing)
        return error_response(
            request, 503, "SERVICE_UNAVAILABLE", f"not ready: {detail}", extra={"checks": checks}
        )


async def run_checks(resources: Resources) -> dict[str, str]:
    """Probe each dependency concurrently, each within :data:`CHECK_TIMEOUT_S`."""
    probes: dict[str, Callable[[], Awaitable[None]]] = {
        "postgres": lambda: _postgres(resources),
        "s3": lambda: anyio.to_thread.run_sync(resources.objects.ping),
        "redis": lambda: _redis(resources),
    }
    results = await asyncio.gather(*(_outcome(probe) for probe in probes.values()))
    return dict(zip(probes, results, strict=True))


async def _outcome(probe: Callable[[], Awaitable[None]]) -> str:
    try:
        await asyncio.wait_for(probe(), CHECK_TIMEOUT_S)
    except TimeoutError:
        return "unreachable (timed out)"
    except Exception as exc:
        return f"unreachable ({type(exc).__name__})"
    return "ok"


async def _postgres(resources: Resources) -> None:
    async with resources.db.connection(timeout=CHECK_TIMEOUT_S) as conn:
        await conn.execute("SELECT 1")


async def _redis(resources: Resources) -> None:
    await resources.redis.ping()
