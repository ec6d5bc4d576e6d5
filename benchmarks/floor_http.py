"""The floor's chain behind the thinnest Litestar app: what HTTP in and SSE out add to it.

Served by ``python -m benchmarks.floor --http`` through uvicorn (uvloop, httptools, one worker),
exactly as ``queuecore serve`` runs QueueCore. No authentication, rate limiting, validation,
partition lookup, segment encoding, idempotency or lease bookkeeping beyond the floor's: a
publish is answered once its flush committed, a member's stream gets each leased message as
one ``message`` event whose data is the published body.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar, Request, Response, get, post
from litestar.response import Stream

from benchmarks.floor import Config, Item, chain, prepare

ENV = "QUEUECORE_FLOOR_"  # the settings the parent process passes
SEPARATOR = b"\n\n"


def _config() -> Config:
    return Config(
        rate_per_s=0,
        duration_s=0,
        warmup_s=0,
        partitions=int(os.environ[ENV + "PARTITIONS"]),
        members=int(os.environ[ENV + "MEMBERS"]),
        overlap=int(os.environ[ENV + "OVERLAP"]),
        lease=os.environ[ENV + "LEASE"] == "1",
        linger_ms=float(os.environ[ENV + "LINGER_MS"]),
    )


def create_app() -> Litestar:
    """The app: ``POST /publish``, ``GET /stream/{member}``, ``GET /healthz``."""
    cfg = _config()
    s3, database = os.environ[ENV + "S3"], os.environ[ENV + "DATABASE"]
    streams: list[asyncio.Queue[list[Item]]] = [asyncio.Queue() for _ in range(cfg.members)]
    counter = itertools.count()

    def deliver(member: int, items: list[Item]) -> None:
        streams[member].put_nowait(items)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        prepare(cfg, s3, database)
        async with chain(cfg, s3, database, deliver) as floor:
            app.state.floor = floor
            yield

    @post("/publish", status_code=201)
    async def publish(request: Request[None, None, None]) -> Response[bytes]:
        answered = asyncio.get_running_loop().create_future()
        request.app.state.floor.add(
            (next(counter), time.monotonic(), await request.body(), answered)
        )
        await answered
        return Response(b'{"stored":true}', media_type="application/json", status_code=201)

    @get("/stream/{member:int}")
    async def stream(member: int) -> Stream:
        async def events() -> AsyncIterator[bytes]:
            yield b": open\n\n"
            while True:
                items = await streams[member].get()
                yield b"".join(b"event: message\ndata: " + item[2] + SEPARATOR for item in items)

        return Stream(events(), media_type="text/event-stream")

    @get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    return Litestar([publish, stream, healthz], lifespan=[lifespan], openapi_config=None)
