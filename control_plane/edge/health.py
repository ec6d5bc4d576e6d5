"""Liveness and readiness probes.

Ready means able to serve: ``/readyz`` is 503 only when this replica cannot do its core work
(PostgreSQL unreachable) or is draining (:func:`start_draining`, on SIGTERM). Redis (rate limits
fail open) or S3 (reads from cache, consumption) down is a degraded 200 that names them, so a load
balancer does not take every replica out for a cache outage (docs/faults.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from litestar import Controller, Litestar, Request, Response, get
from litestar.di import NamedDependency

from control_plane.edge.errors import error_response
from control_plane.edge.resources import Resources
from core.db import ping

CHECK_TIMEOUT_S = 3.0
REQUIRED = frozenset({"postgres"})  # without these the replica cannot serve: not ready


def start_draining(app: Litestar) -> None:
    """Mark the replica as draining: ``/readyz`` answers 503 from now on (set on SIGTERM)."""
    app.state.draining = True


def is_draining(app: Litestar) -> bool:
    """Whether :func:`start_draining` was called."""
    return bool(app.state.get("draining", False))


class HealthController(Controller):
    """``/healthz`` (process alive) and ``/readyz`` (able to serve; degraded dependencies named)."""

    include_in_schema = True
    tags = ["health"]

    @get("/healthz", summary="Liveness: the process is serving requests")
    async def healthz(self) -> dict[str, str]:
        """Always ``ok`` while the process can answer."""
        return {"status": "ok"}

    @get(
        "/readyz",
        summary="Readiness: able to serve (PostgreSQL reachable, not draining)",
        description=(
            "200 `ready`, or 200 `degraded` naming in `degraded` the dependencies (Redis, S3) "
            "that do not answer while the replica still serves; 503 `SERVICE_UNAVAILABLE` when "
            "PostgreSQL does not answer or the replica is draining."
        ),
    )
    async def readyz(
        self, request: Request[Any, Any, Any], resources: NamedDependency[Resources]
    ) -> Response[dict[str, Any]]:
        """200 while this replica can serve (``degraded`` names what is down), else 503."""
        checks = await run_checks(resources)
        failing = sorted(name for name, result in checks.items() if result != "ok")
        fatal = [name for name in failing if name in REQUIRED]
        if is_draining(request.app):
            fatal.insert(0, "draining")
            checks = {**checks, "draining": "shutting down"}
        if not fatal:
            status = "degraded" if failing else "ready"
            return Response({"status": status, "checks": checks, "degraded": failing})
        detail = "; ".join(f"{name}: {checks[name]}" for name in fatal)
        return error_response(
            request,
            503,
            "SERVICE_UNAVAILABLE",
            f"not ready: {detail}",
            extra={"checks": checks, "degraded": failing},
        )


async def run_checks(resources: Resources) -> dict[str, str]:
    """Probe each dependency concurrently, each within :data:`CHECK_TIMEOUT_S`."""
    probes: dict[str, Callable[[], Awaitable[None]]] = {
        "postgres": lambda: ping(resources.db, CHECK_TIMEOUT_S),
        # Abandoned at the limit: a thread blocked on a frozen S3 must not hold the answer.
        "s3": lambda: anyio.to_thread.run_sync(resources.objects.ping, abandon_on_cancel=True),
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


async def _redis(resources: Resources) -> None:
    await resources.redis.ping()
