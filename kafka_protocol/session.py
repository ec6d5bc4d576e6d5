"""What a Kafka connection knows: who authenticated, through which listener, and the services
its handlers call (the process's data plane, key authenticator, rate limiter and usage meter)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Protocol

from data_plane.service import DataPlane
from tenants.errors import InvalidApiKey
from tenants.models import AuthContext
from tenants.rate_limits import Decision
from tenants.tiers import Category

RECHECK_KEY_S = 2.0  # a revoked key stops working on open connections within this


class Authenticator(Protocol):
    """Resolves an API key to its context (cached briefly), or raises ``InvalidApiKey``."""

    async def authenticate(self, presented: str | None) -> AuthContext:
        """The key's context."""


class Limiter(Protocol):
    """The process's rate limiter (``tenants.rate_limits.RateLimiter``)."""

    async def hit(self, organisation_id: str, key_id: str, category: Category) -> Decision:
        """Count one request of ``category`` if it fits; whether it did and when there is room."""


class Admission(Protocol):
    """Publish work in the works per organisation (``control_plane.edge.admission.OrgAdmission``,
    the one the process's REST publishes share): a flood waits behind its own backlog."""

    async def acquire(self, organisation_id: str, weight: int, size: int) -> None:
        """Wait until the organisation has room for ``size`` more bytes, and take them."""

    def release(self, organisation_id: str, size: int) -> None:
        """An admitted request was answered."""


class RequestMeter(Protocol):
    """Counts admitted requests per environment and category (billing's usage meter)."""

    def request(self, environment_id: str, category: str) -> None:
        """One admitted request."""


@dataclass(frozen=True, slots=True)
class Listener:
    """Where clients are told to connect (Metadata, FindCoordinator) for one listener."""

    host: str
    port: int
    tls: bool


@dataclass(frozen=True, slots=True)
class Services:
    """The process-wide services every connection shares."""

    data_plane: DataPlane
    authenticator: Authenticator
    limiter: Limiter
    meter: RequestMeter
    max_request_bytes: int
    admission: Admission | None = None  # None: produce requests are not held per organisation


@dataclass
class Session:
    """One client connection's state."""

    services: Services
    listener: Listener
    client_host: str
    key: str | None = None  # the API key it authenticated with (kept to recheck revocation)
    auth: AuthContext | None = None
    checked_s: float = 0.0
    mechanism_ok: bool = False  # SaslHandshake chose PLAIN
    raw_sasl: bool = False  # SaslHandshake v0: the next frame is a bare SASL token
    closing: asyncio.Event = field(default_factory=asyncio.Event)

    async def recheck(self) -> AuthContext | None:
        """The context, re-validated every :data:`RECHECK_KEY_S` (None once the key is gone).
        A check that cannot be made (PostgreSQL out of reach) raises: the caller ends the
        connection rather than serve on a key it could not check, nor call the key revoked."""
        if self.auth is None or self.key is None:
            return None
        now = time.monotonic()
        if now - self.checked_s >= RECHECK_KEY_S:
            try:
                self.auth = await self.services.authenticator.authenticate(self.key)
            except InvalidApiKey:
                self.auth = None
                return None
            self.checked_s = now
        return self.auth
