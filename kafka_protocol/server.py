"""The Kafka protocol listener: an asyncio TCP server (TLS when a certificate is configured).

Per connection, frames are read in order; until SASL/PLAIN succeeds only ApiVersions and the
SASL requests are served (anything else closes the connection, as a Kafka broker does). After
that, requests run concurrently (a producer pipelines several produce requests) and their
responses are written in request order, as the protocol requires; a produce with ``acks=0``
gets none. Unknown APIs or versions close the connection, except ApiVersions, which answers a
version it does not know in the v0 format with UNSUPPORTED_VERSION and the versions it serves.

Rate limits are applied the Kafka way: a request over its key's budget is held until the
window has room, and its response reports the wait as ``throttle_time_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from core import db, settings
from kafka_protocol import wire
from kafka_protocol.handlers import CATEGORIES, HANDLERS
from kafka_protocol.handlers.auth import api_versions_v0_error, authenticate_raw
from kafka_protocol.session import Listener, Services, Session
from kafka_protocol.versions import BEFORE_AUTHENTICATION, Api, supports
from observability.logging import get_logger
from tenants.rate_limits import Decision
from tenants.tiers import tier_weight

log = get_logger("queuecore.kafka")

MAX_INFLIGHT_PER_CONNECTION = 32
MAX_THROTTLE_WAIT_MS = 30_000
_SIZE = struct.Struct(">i")

Handler = Callable[[Session, wire.RequestHead, Any], Awaitable[Any]]


class KafkaServer:
    """Serves the Kafka protocol on one listener (address, optional TLS)."""

    def __init__(
        self,
        services: Services,
        host: str,
        port: int,
        advertised: Listener,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.services = services
        self.host = host
        self.port = port
        self.advertised = advertised
        self.tls = tls
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen (several processes may share the port: ``SO_REUSEPORT``)."""
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, ssl=self.tls, reuse_port=True, limit=1 << 20
        )
        log.info("kafka_listening", host=self.host, port=self.port, tls=self.tls is not None)

    async def close(self) -> None:
        """Stop accepting, end every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("", 0)
        session = Session(self.services, self.advertised, str(peer[0]))
        try:
            await Connection(session, reader, writer).run()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            log.warning("kafka_connection_failed", error=type(exc).__name__, exc_info=exc)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


# A Produce request's place in its connection's order: the previous one's turn, and its own.
_Turn = tuple["asyncio.Future[None] | None", "asyncio.Future[None]"]


async def _wait_turn(turn: _Turn | None) -> None:
    """Wait until the connection's previous Produce request went on, then let the next go.

    Pipelined Produce requests reach the writer in the order they arrived, whatever order their
    rate-limit and admission round trips end in: an idempotent producer's batches to a partition
    are checked in sequence order (data_plane.write.records), and a later batch overtaking an
    earlier one would be refused as out of order, which librdkafka treats as fatal. The handler
    starts right after, so its partitions' appends are queued before the next request's.
    """
    if turn is None:
        return
    previous = turn[0]
    try:
        if previous is not None:
            await asyncio.shield(previous)
    finally:
        _end_turn(turn)


def _end_turn(turn: _Turn | None) -> None:
    if turn is not None and not turn[1].done():
        turn[1].set_result(None)


def _request_budget_s() -> float | None:
    """How long one request may wait on PostgreSQL in all (as an HTTP request)."""
    return db.request_budget_s(settings.database())


class Connection:
    """One client connection: read frames, dispatch, answer in order."""

    def __init__(
        self, session: Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.session = session
        self.reader = reader
        self.writer = writer
        self.answers: asyncio.Queue[asyncio.Future[bytes | None] | None] = asyncio.Queue()
        self.slots = asyncio.Semaphore(MAX_INFLIGHT_PER_CONNECTION)
        # The last Produce request's turn: set once it has passed its rate limit and admission.
        self._produce_turn: asyncio.Future[None] | None = None

    async def run(self) -> None:
        """Serve until the client goes or breaks the protocol."""
        sender = asyncio.create_task(self._send_answers())
        try:
            while not self.session.closing.is_set():
                frame = await self._read_frame()
                if frame is None:
                    break
                if not await self._dispatch(frame):
                    break
            self.answers.put_nowait(None)
            await sender
        finally:
            sender.cancel()

    async def _read_frame(self) -> bytes | None:
        try:
            head = await self.reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return None
        (size,) = _SIZE.unpack(head)
        if size < 0 or size > self.session.services.max_request_bytes:
            log.info("kafka_frame_refused", size=size, client_host=self.session.client_host)
            return None
        return await self.reader.readexactly(size)

    async def _dispatch(self, frame: bytes) -> bool:
        """Start serving one request; False to close the connection."""
        session = self.session
        if session.raw_sasl:
            return await self._raw_sasl(frame)  # SaslHandshake v0: a bare PLAIN token
        api_key, version, correlation_id = wire.peek(frame)
        if session.auth is None and api_key not in BEFORE_AUTHENTICATION:
            log.info("kafka_unauthenticated_request", api_key=api_key)
            return False
        if not supports(api_key, version):
            if api_key == Api.API_VERSIONS:
                self._answer_now(api_versions_v0_error(correlation_id))
                return True
            log.info("kafka_unsupported_version", api_key=api_key, version=version)
            return False
        try:
            head, body = wire.read_request(frame, api_key, version)
        except Exception as exc:  # a frame that does not parse as its API says: end it
            log.info(
                "kafka_malformed_request",
                api=api_key,
                version=version,
                error=str(exc)[:200],
                frame=frame[:200].hex(),
            )
            return False
        try:
            with db.deadline(_request_budget_s()):
                if api_key in BEFORE_AUTHENTICATION:  # in order: the next frame depends on it
                    response = await HANDLERS[api_key](session, head, body)
                    self._answer_now(wire.write_response(head, response))
                    return not session.closing.is_set()
                auth = await session.recheck()
        except Exception as exc:  # the key could not be checked (PostgreSQL): the client retries
            log.info("kafka_key_unverifiable", api_key=api_key, error=type(exc).__name__)
            return False
        if auth is None:
            log.info("kafka_key_no_longer_valid", api_key=api_key)
            return False
        await self.slots.acquire()
        turn = None
        if head.api_key == Api.PRODUCE:  # taken in arrival order, before anything is awaited
            turn = (self._produce_turn, asyncio.get_running_loop().create_future())
            self._produce_turn = turn[1]
        future: asyncio.Future[bytes | None] = asyncio.ensure_future(
            self._serve(head, body, len(frame), turn)
        )
        future.add_done_callback(lambda _: self.slots.release())
        if turn is not None:  # however it ends (even cancelled before it ran), the next goes
            future.add_done_callback(lambda _: _end_turn(turn))
        self.answers.put_nowait(future)
        return True

    async def _serve(
        self, head: wire.RequestHead, body: Any, size: int, turn: _Turn | None = None
    ) -> bytes | None:
        try:
            throttle_ms, decision = await self._admit(head.api_key)
            admission = self.session.services.admission
            auth = self.session.auth
            if admission is None or decision is None or auth is None or turn is None:
                await _wait_turn(turn)
                return await self._answer(head, body, throttle_ms)
            # A produce holds its size against its organisation until answered, as a REST
            # publish does (control_plane.edge.admission); acks=0 is answered at once.
            organisation_id = auth.organisation_id
            await admission.acquire(organisation_id, tier_weight(decision.limit), size)
        except BaseException:
            _end_turn(turn)
            raise
        try:
            await _wait_turn(turn)
            return await self._answer(head, body, throttle_ms)
        finally:
            admission.release(organisation_id, size)

    async def _answer(self, head: wire.RequestHead, body: Any, throttle_ms: int) -> bytes | None:
        # Its waits on PostgreSQL are bounded as an HTTP request's are (docs/faults.md).
        with db.deadline(_request_budget_s()):
            response = await HANDLERS[head.api_key](self.session, head, body)
        if response is None:
            return None  # acks=0
        if throttle_ms and wire.has_field(type(response), "throttle_time"):
            response = dataclasses.replace(
                response, throttle_time=datetime.timedelta(milliseconds=throttle_ms)
            )
        return wire.write_response(head, response)

    async def _admit(self, api_key: int) -> tuple[int, Decision | None]:
        """Count the request against its key's budget, holding it while over; the wait in ms
        and the limiter's last decision (None: a request no budget counts)."""
        category = CATEGORIES.get(api_key)
        auth = self.session.auth
        if category is None or auth is None:
            return 0, None
        services = self.session.services
        waited = 0
        while True:
            decision = await services.limiter.hit(auth.organisation_id, auth.key_id, category)
            if decision.allowed or waited >= MAX_THROTTLE_WAIT_MS:
                break
            pause = max(decision.reset_ms, 10)
            await asyncio.sleep(pause / 1000)
            waited += pause
        services.meter.request(auth.environment_id, category)
        return waited, decision

    async def _raw_sasl(self, frame: bytes) -> bool:
        try:
            with db.deadline(_request_budget_s()):
                ok = await authenticate_raw(self.session, frame)
        except Exception as exc:  # the key could not be checked (PostgreSQL): the client retries
            log.info("kafka_key_unverifiable", error=type(exc).__name__)
            return False
        self._answer_now(_SIZE.pack(0) if ok else None)
        return ok

    def _answer_now(self, data: bytes | None) -> None:
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        future.set_result(data)
        self.answers.put_nowait(future)

    async def _send_answers(self) -> None:
        while (future := await self.answers.get()) is not None:
            try:
                data = await future
            except Exception as exc:
                log.warning("kafka_request_failed", error=type(exc).__name__, exc_info=exc)
                self.session.closing.set()
                self.writer.close()
                return
            if data is not None:
                self.writer.write(data)
                await self.writer.drain()
