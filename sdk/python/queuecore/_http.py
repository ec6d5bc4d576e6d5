"""The HTTP layer: one pooled ``httpx.AsyncClient``, request ids, error mapping, and retries.

Retry policy. A request is sent again, up to ``max_retries`` times, when:

- the server answered 429 (the rate limiter refuses before anything runs): after
  ``Retry-After`` plus a little jitter, else exponential backoff with full jitter;
- the connection could not be made (nothing was sent): exponential backoff;
- the server answered 503 (or a proxy 502/504), or the answer was lost (timeout, reset, disconnect), and the request
  is marked ``idempotent``: repeating it cannot do the work twice.

A call not marked idempotent fails with the 503 or :class:`APIConnectionError` instead,
because the server may have done the work. Every attempt of one call carries the same
``X-Request-Id``, which the server adopts, so its logs show the retries under one id; a
publish carries the same ``idempotencyKey`` on every attempt (it is in the request body,
built once per call), so the server stores it once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import string
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Union

import httpx

from queuecore.errors import (
    APIConnectionError,
    APITimeoutError,
    QueueCoreError,
    error_from_response,
    retry_after_s,
)

_ALPHABET = string.ascii_letters + string.digits
_NOTHING_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_GATEWAY_UNAVAILABLE = frozenset({502, 503, 504})  # 503 from QueueCore, 502/504 from a proxy
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0
RETRY_AFTER_JITTER = 0.2  # spread clients told the same Retry-After over 20 % more time


def new_request_id() -> str:
    """``req_`` + 24 random base62 characters, the server's own format."""
    return "req_" + "".join(secrets.choice(_ALPHABET) for _ in range(24))


def backoff_s(attempt: int) -> float:
    """Full-jitter exponential backoff for the ``attempt``-th retry (0-based)."""
    return random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2**attempt))


Outcome = Union[httpx.Response, httpx.HTTPError]


class Transport:
    """Sends requests to the API with the key, retries what is safe, raises mapped errors."""

    def __init__(
        self,
        api_key: str,
        base_url: str,
        timeout_s: float,
        max_retries: int,
        logger: logging.Logger,
        user_agent: str,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.logger = logger
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=timeout_s,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": user_agent},
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        )

    async def close(self) -> None:
        """Close the pooled connections."""
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        idempotent: bool,
        json: Any = None,
        content: bytes | None = None,
        params: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Send with retries; the decoded JSON body (None when empty) or a mapped error.

        ``content`` is a body already encoded as JSON (sent as is)."""
        request = self._build(method, path, json, params, timeout_s, content)
        response = await self._send(request, idempotent, stream=False)
        return response.json() if response.content else None

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        read_timeout_s: float,
        params: dict[str, Any] | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """A streamed response (SSE); only its opening is retried, as for a non-idempotent call."""
        request = self._build(method, path, None, params, self.timeout_s)
        request.extensions["timeout"] = httpx.Timeout(self.timeout_s, read=read_timeout_s).as_dict()
        response = await self._send(request, idempotent=False, stream=True)
        try:
            yield response
        finally:
            await response.aclose()

    def _build(
        self,
        method: str,
        path: str,
        json: Any,
        params: dict[str, Any] | None,
        timeout_s: float | None,
        content: bytes | None = None,
    ) -> httpx.Request:
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        headers = {"X-Request-Id": new_request_id()}
        if content is not None:
            headers["Content-Type"] = "application/json"
        return self._http.build_request(
            method,
            path,
            json=json,
            content=content,
            params=clean or None,
            headers=headers,
            timeout=self.timeout_s if timeout_s is None else timeout_s,
        )

    async def _send(self, request: httpx.Request, idempotent: bool, stream: bool) -> httpx.Response:
        """Attempt until success, a final error, or the retry budget is spent."""
        attempt = 0
        while True:
            outcome = await self._attempt(request, stream)
            if isinstance(outcome, httpx.Response) and outcome.status_code < 400:
                return outcome
            error = self._error(outcome, request)
            if attempt >= self.max_retries or not self._retryable(outcome, idempotent):
                raise error
            delay_s = self._delay_s(outcome, attempt)
            self._log_retry(request, error, attempt + 1, delay_s)
            await asyncio.sleep(delay_s)
            attempt += 1

    async def _attempt(self, request: httpx.Request, stream: bool) -> Outcome:
        try:
            response = await self._http.send(request, stream=stream)
        except httpx.TransportError as exc:
            return exc
        if stream and response.status_code >= 400:
            await response.aread()
            await response.aclose()
        return response

    @staticmethod
    def _error(outcome: Outcome, request: httpx.Request) -> QueueCoreError:
        request_id = request.headers["X-Request-Id"]
        if isinstance(outcome, httpx.Response):
            return error_from_response(outcome, request_id)
        kind = (
            APITimeoutError if isinstance(outcome, httpx.TimeoutException) else APIConnectionError
        )
        code = "TIMEOUT" if kind is APITimeoutError else "CONNECTION_ERROR"
        message = f"{request.method} {request.url.path}: {type(outcome).__name__}: {outcome}"
        return kind(code, message, None, request_id)

    @staticmethod
    def _retryable(outcome: Outcome, idempotent: bool) -> bool:
        if isinstance(outcome, httpx.Response):
            status = outcome.status_code
            return status == 429 or (status in _GATEWAY_UNAVAILABLE and idempotent)
        return isinstance(outcome, _NOTHING_SENT) or idempotent

    @staticmethod
    def _delay_s(outcome: Outcome, attempt: int) -> float:
        told = retry_after_s(outcome) if isinstance(outcome, httpx.Response) else None
        if told is None:
            return backoff_s(attempt)
        return told + random.uniform(0, told * RETRY_AFTER_JITTER)

    def _log_retry(
        self, request: httpx.Request, error: QueueCoreError, attempt: int, delay_s: float
    ) -> None:
        """One line per retry: what failed and when it is tried again (never the key)."""
        self.logger.info(
            "queuecore retry %d/%d of %s %s in %.2fs after %s (request %s)",
            attempt,
            self.max_retries,
            request.method,
            request.url.path,
            delay_s,
            error.code,
            error.request_id,
            extra={
                "queuecore_retry": attempt,
                "queuecore_status": error.status,
                "queuecore_code": error.code,
                "queuecore_request_id": error.request_id,
            },
        )
