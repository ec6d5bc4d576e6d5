"""ApiVersions and SASL/PLAIN: the password is an API key; the username is not checked."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_protocol import wire
from kafka_protocol.session import Session
from kafka_protocol.versions import SUPPORTED, Api
from observability.logging import get_logger
from tenants.errors import InvalidApiKey

log = get_logger("queuecore.kafka")

MECHANISM = "PLAIN"
SESSION_LIFETIME_MS = 0  # no re-authentication needed; revocations are checked per request


async def api_versions(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """The APIs and versions this listener serves."""
    cls = wire.response_type(Api.API_VERSIONS, head.api_version)
    return wire.entity(
        cls,
        error_code=ErrorCode.none,
        api_keys=_api_keys(cls),
        throttle_time=0,
    )


def api_versions_v0_error(correlation_id: int) -> bytes:
    """An ApiVersions answer to a version this listener does not know: v0 format, with
    UNSUPPORTED_VERSION and the versions it serves, so the client can retry with one of them."""
    cls = wire.response_type(Api.API_VERSIONS, 0)
    response = wire.entity(cls, error_code=ErrorCode.unsupported_version, api_keys=_api_keys(cls))
    head = wire.RequestHead(Api.API_VERSIONS, 0, correlation_id, "")
    return wire.write_response(head, response)


def _api_keys(cls: type[Any]) -> tuple[Any, ...]:
    entry = wire.nested(cls, "ApiVersion")
    return tuple(
        wire.entity(entry, api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(SUPPORTED.items())
    )


async def sasl_handshake(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Only PLAIN is offered; v0 sends the token next as a bare frame."""
    cls = wire.response_type(Api.SASL_HANDSHAKE, head.api_version)
    if body.mechanism != MECHANISM:
        session.closing.set()
        return wire.entity(
            cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=(MECHANISM,)
        )
    session.mechanism_ok = True
    session.raw_sasl = head.api_version == 0
    return wire.entity(cls, error_code=ErrorCode.none, mechanisms=(MECHANISM,))


async def sasl_authenticate(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Check the PLAIN token's password as an API key; a failure ends the connection."""
    cls = wire.response_type(Api.SASL_AUTHENTICATE, head.api_version)
    ok = session.mechanism_ok and await _login(session, bytes(body.auth_bytes))
    if not ok:
        session.closing.set()
        return wire.entity(
            cls,
            error_code=ErrorCode.sasl_authentication_failed,
            error_message="Authentication failed: the password must be a valid QueueCore API key.",
            auth_bytes=b"",
            session_lifetime=0,
        )
    return wire.entity(
        cls, error_code=ErrorCode.none, error_message=None, auth_bytes=b"", session_lifetime=0
    )


async def authenticate_raw(session: Session, frame: bytes) -> bool:
    """The bare token after a v0 handshake."""
    session.raw_sasl = False
    return await _login(session, frame)


async def _login(session: Session, token: bytes) -> bool:
    parts = token.split(b"\0")
    if len(parts) != 3:
        return False
    try:
        key = parts[2].decode()
        context = await session.services.authenticator.authenticate(key)
    except (UnicodeDecodeError, InvalidApiKey):
        log.info("kafka_authentication_failed", client_host=session.client_host)
        return False
    session.key, session.auth, session.checked_s = key, context, time.monotonic()
    log.info("kafka_authenticated", client_host=session.client_host, **context.log_fields())
    return True
