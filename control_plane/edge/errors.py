"""The one place errors become HTTP responses: ``{"error": {code, message, status, requestId}}``."""

from __future__ import annotations

from typing import Any, NamedTuple

from litestar import MediaType, Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    SerializationException,
    ValidationException,
)

from control_plane.edge.request_id import request_id
from core.errors import (
    ClientError,
    Conflict,
    NotFound,
    QueueCoreError,
    ServerError,
    Unavailable,
    ValidationFailed,
)
from observability.logging import get_logger

log = get_logger("queuecore.errors")

STATUS_BY_CODE: dict[str, int] = {
    "BAD_REQUEST": 400,
    "INVALID_API_KEY": 401,
    "UNAUTHORIZED": 401,
    "INVALID_CREDENTIALS": 401,
    "FORBIDDEN": 403,
    "CSRF_FAILED": 403,
    "NOT_FOUND": 404,
    "TOPIC_NOT_FOUND": 404,
    "PARTITION_NOT_FOUND": 404,
    "OFFSET_OUT_OF_RANGE": 416,
    "SEGMENT_UNREADABLE": 500,
    "KEY_NOT_FOUND": 404,
    "ORGANISATION_NOT_FOUND": 404,
    "PROJECT_NOT_FOUND": 404,
    "ENVIRONMENT_NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "CONFLICT": 409,
    "KEY_LIMIT_REACHED": 409,
    "EMAIL_TAKEN": 409,
    "TOPIC_EXISTS": 409,
    "TOPIC_LIMIT_REACHED": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "REQUEST_TIMEOUT": 408,  # from the HTTP server itself (control_plane.http_limits)
    "REQUEST_HEADERS_TOO_LARGE": 431,  # likewise
    "VALIDATION_ERROR": 422,
    "QUOTA_EXCEEDED": 422,
    "RATE_LIMIT_EXCEEDED": 429,
    "INTERNAL_ERROR": 500,
    "SERVICE_UNAVAILABLE": 503,
}

REALM = "queuecore"
CLIENT_GONE = "client disconnected prematurely"  # Litestar's words for a body cut short

_CODE_BY_STATUS = {
    400: "VALIDATION_ERROR",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "RATE_LIMIT_EXCEEDED",
    503: "SERVICE_UNAVAILABLE",
}


_STATUS_BY_KIND: tuple[tuple[type[QueueCoreError], int], ...] = (
    (NotFound, 404),
    (Conflict, 409),
    (ValidationFailed, 422),
    (Unavailable, 503),
)


def error_response(
    request: Request[Any, Any, Any],
    status: int,
    code: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    details: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> Response[dict[str, Any]]:
    """Build the documented error body."""
    body: dict[str, Any] = {
        "code": code,
        "message": message,
        "status": status,
        "requestId": request_id(request.scope),
    }
    if details:
        body["details"] = details
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": _challenge(request, code, message)}
    return Response(
        content={"error": body, **(extra or {})},
        status_code=status,
        media_type=MediaType.JSON,
        headers=headers,
    )


def _challenge(request: Request[Any, Any, Any], code: str, message: str) -> str:
    """RFC 6750's challenge: the realm, and ``invalid_token`` when a key was presented."""
    if not request.headers.get("authorization") or code != "INVALID_API_KEY":
        return f'Bearer realm="{REALM}"'
    detail = message.replace('"', "'")
    return f'Bearer realm="{REALM}", error="invalid_token", error_description="{detail}"'


def status_for(error: QueueCoreError) -> int:
    """HTTP status of a domain error: by its code, else by its kind."""
    if error.code in STATUS_BY_CODE:
        return STATUS_BY_CODE[error.code]
    for kind, status in _STATUS_BY_KIND:
        if isinstance(error, kind):
            return status
    return 500 if isinstance(error, ServerError) else 400


def handle_domain_error(
    request: Request[Any, Any, Any], exc: QueueCoreError
) -> Response[dict[str, Any]]:
    """Domain errors keep their code; server errors are logged with their trace."""
    status = status_for(exc)
    request_id(request.scope)
    if status >= 500:
        log.error("server_error", code=exc.code, error=exc.message, exc_info=exc)
    headers: dict[str, str] = dict(exc.data.get("headers") or {})  # e.g. X-RateLimit-*
    if "retry_after_s" in exc.data:
        headers["Retry-After"] = str(exc.data["retry_after_s"])
    field = exc.data.get("field")
    details = (
        [{"field": field, "message": exc.message}]
        if isinstance(exc, ClientError) and field
        else None
    )
    return error_response(
        request,
        status,
        exc.code,
        exc.message,
        headers=headers or None,
        details=details,
        extra=exc.data.get("body"),  # fields beside "error", e.g. an ack's per-id verdicts
    )


def handle_validation(
    request: Request[Any, Any, Any], exc: ValidationException
) -> Response[dict[str, Any]]:
    """Body or parameter validation: name each offending field."""
    details = [_detail(item) for item in exc.extra] if isinstance(exc.extra, list) else []
    if not details:
        return error_response(request, 400, "VALIDATION_ERROR", exc.detail or "Invalid request")
    fields = ", ".join(d["field"] for d in details if d.get("field"))
    message = (
        f"Invalid value for {fields}: {details[0]['message']}"
        if fields
        else str(details[0]["message"])
    )
    return error_response(request, 422, "VALIDATION_ERROR", message, details=details)


def _detail(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        return {"field": None, "message": str(item)}
    key = item.get("key")
    message = str(item.get("message", "invalid value"))
    field = _field_from_message(message) if key in (None, "", "body", "data") else key
    return {"field": field, "message": message}


def _field_from_message(message: str) -> str | None:
    """The JSON path msgspec names: "... - at `$.partitions`" or "missing required field `x`"."""
    path = None
    if "at `$." in message:
        path = message.split("at `$.", 1)[1].split("`", 1)[0]
    missing = "missing required field `"
    if missing in message:
        name = message.split(missing, 1)[1].split("`", 1)[0]
        path = f"{path}.{name}" if path else name
    return path


def handle_http(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    """Litestar's own HTTP errors (404 route, 405 method, 413 body size, …)."""
    status = exc.status_code
    if isinstance(exc, NotFoundException):
        message = f"No route for {request.method} {request.url.path}"
    elif isinstance(exc, MethodNotAllowedException):
        message = f"Method {request.method} is not allowed on {request.url.path}"
    elif isinstance(exc.__cause__, SerializationException):
        message = f"Request body is not valid JSON: {exc.detail}"
    else:
        message = exc.detail
    request_id(request.scope)
    if message == CLIENT_GONE:
        # Nobody will read this response: the client hung up while sending its body.
        log.info("client_disconnected", path=request.url.path)
        return error_response(
            request,
            400,
            "BAD_REQUEST",
            "The client disconnected before sending the whole request body",
        )
    code = _CODE_BY_STATUS.get(status, "INTERNAL_ERROR" if status >= 500 else "BAD_REQUEST")
    if status >= 500:
        log.error("server_error", code=code, error=message, exc_info=exc)
    return error_response(request, status, code, message, headers=exc.headers)


class _Answer(NamedTuple):
    """How an exception from a backing service is answered."""

    status: int
    code: str
    message: str
    retry: bool = True  # with Retry-After: 1


_UNREACHABLE = "QueueCore cannot reach {} right now; retry shortly."
_CONFLICTED = "A concurrent update conflicted with this request; nothing was changed. Retry it."


def _database_answer(exc: BaseException) -> _Answer | None:
    """The documented answer to a PostgreSQL error (docs/faults.md, "Database errors"), by
    psycopg's class of its SQLSTATE; None for a programming error (a bug: 500) or another
    exception."""
    import psycopg
    import psycopg_pool
    from psycopg import errors as pg_errors

    if isinstance(exc, pg_errors.TransactionRollback | pg_errors.DeadlockDetected):
        return _Answer(503, "SERVICE_UNAVAILABLE", _CONFLICTED)  # 40xxx: safe to retry
    if isinstance(exc, psycopg.IntegrityError):  # 23xxx: a concurrent change won a race
        return _Answer(409, "CONFLICT", "The request conflicts with a concurrent change.", False)
    if isinstance(exc, psycopg.DataError):  # 22xxx: a value the database cannot hold
        message = "A value in the request is outside what QueueCore can store."
        return _Answer(422, "VALIDATION_ERROR", message, False)
    outage = (
        psycopg.OperationalError,  # connection, timeouts, shutdown, resources, DatabaseStalled
        psycopg.InterfaceError,  # a connection the client already closed
        psycopg.InternalError,  # 25xxx (idle-in-transaction timeout, read-only), XX000
        psycopg_pool.PoolTimeout,
    )
    if isinstance(exc, outage):
        return _Answer(503, "SERVICE_UNAVAILABLE", _UNREACHABLE.format("the metadata store"))
    return None


def _service_answer(exc: BaseException) -> _Answer | None:
    """A 503 for Redis or S3 out of reach."""
    import botocore.exceptions
    import redis

    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return _Answer(503, "SERVICE_UNAVAILABLE", _UNREACHABLE.format("the cache"))
    if isinstance(
        exc,
        botocore.exceptions.EndpointConnectionError
        | botocore.exceptions.ConnectTimeoutError
        | botocore.exceptions.ReadTimeoutError,
    ):
        return _Answer(503, "SERVICE_UNAVAILABLE", _UNREACHABLE.format("object storage"))
    return None


def handle_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """A backing service's error is answered as documented; anything else is a bug: trace in
    the log only."""
    request_id(request.scope)
    answer = _database_answer(exc) or _service_answer(exc)
    if answer is None:
        log.error("unhandled_exception", method=request.method, path=request.url.path, exc_info=exc)
        return error_response(
            request,
            500,
            "INTERNAL_ERROR",
            "An unexpected error occurred; quote the request id when reporting it",
        )
    log.warning(
        "backing_service_error",
        status=answer.status,
        error=type(exc).__name__,
        sqlstate=getattr(exc, "sqlstate", None),
        path=request.url.path,
    )
    headers = {"Retry-After": "1"} if answer.retry else None
    return error_response(request, answer.status, answer.code, answer.message, headers=headers)


def handle_undecodable(
    request: Request[Any, Any, Any], exc: UnicodeDecodeError
) -> Response[dict[str, Any]]:
    """A body that is not UTF-8 (JSON must be): the client's error, not the server's."""
    log.info("body_not_utf8", path=request.url.path)
    return error_response(request, 400, "VALIDATION_ERROR", "Request body is not valid UTF-8 JSON")


def handle_too_deep(
    request: Request[Any, Any, Any], exc: RecursionError
) -> Response[dict[str, Any]]:
    """JSON nested deeper than the decoder follows (about a thousand levels)."""
    log.info("body_too_deep", path=request.url.path)
    return error_response(
        request, 400, "VALIDATION_ERROR", "Request body is nested too deeply to decode"
    )


EXCEPTION_HANDLERS: dict[Any, Any] = {
    QueueCoreError: handle_domain_error,
    ValidationException: handle_validation,
    HTTPException: handle_http,
    UnicodeDecodeError: handle_undecodable,
    RecursionError: handle_too_deep,
    Exception: handle_unexpected,
}
