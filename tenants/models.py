"""Tenancy records as the services return them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenants.tiers import Limits, limits_for

ENVIRONMENT_NAMES = ("development", "staging", "production")
ROLES = ("owner", "admin", "developer", "viewer")


@dataclass(frozen=True, slots=True)
class Organisation:
    """A tenant."""

    id: str
    name: str
    tier: str
    custom_limits: dict[str, Any] | None
    created_at: datetime

    @property
    def limits(self) -> Limits:
        """The effective limits of this organisation."""
        return limits_for(self.tier, self.custom_limits)


@dataclass(frozen=True, slots=True)
class Environment:
    """One of a project's three environments."""

    id: str
    organisation_id: str
    project_id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Project:
    """A project and its environments."""

    id: str
    organisation_id: str
    name: str
    created_at: datetime
    environments: tuple[Environment, ...] = ()

    def environment(self, name: str) -> Environment:
        """The environment called ``name``."""
        return next(env for env in self.environments if env.name == name)


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key as listed: never its secret."""

    id: str
    environment_id: str
    name: str
    hint: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A key just created: the only time its secret exists outside the caller's hands."""

    key: ApiKey
    secret: str


@dataclass(frozen=True, slots=True)
class AuthContext:
    """Who is calling: the key and the organisation, project and environment it is bound to."""

    key_id: str
    organisation_id: str
    project_id: str
    environment_id: str
    environment: str
    scopes: frozenset[str]
    expires_at: datetime | None = None

    def log_fields(self) -> dict[str, str]:
        """Identity bound into every log line (never the key itself)."""
        return {
            "organisation_id": self.organisation_id,
            "project_id": self.project_id,
            "environment_id": self.environment_id,
            "api_key_id": self.key_id,
        }


@dataclass(frozen=True, slots=True)
class NewOrganisation:
    """What ``create_organisation`` made: the tenant, its owner, default project and one key per environment."""

    organisation: Organisation
    owner_id: str
    owner_email: str
    project: Project
    keys: dict[str, IssuedKey] = field(default_factory=dict)
