"""Tenancy rules: organisations, users, projects with their environments, API keys, tiers.

Every function takes an open ``psycopg.AsyncConnection`` and runs inside the caller's
transaction, so the API, the CLI and Celery tasks share the same code and commit boundaries.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from psycopg.types.json import Jsonb

from core.db import Conn
from core.errors import ValidationFailed
from core.wire_types import has_nul
from tenants import keys as key_format
from tenants import queries as q
from tenants.errors import (
    EmailTaken,
    EnvironmentNotFound,
    InvalidApiKey,
    KeyLimitReached,
    KeyNotFound,
    OrganisationNotFound,
    ProjectNotFound,
)
from tenants.ids import new_id
from tenants.models import (
    ENVIRONMENT_NAMES,
    ROLES,
    ApiKey,
    AuthContext,
    Environment,
    IssuedKey,
    NewOrganisation,
    Organisation,
    Project,
)
from tenants.passwords import MIN_PASSWORD_LENGTH, hash_password
from tenants.sessions import MAX_PASSWORD_LENGTH
from tenants.tiers import TIERS, validate_custom_limits

MAX_ACTIVE_KEYS = 2
MAX_NAME = 200  # organisations and projects: the schema's limit (migration 0002)


def _organisation(row: dict[str, Any]) -> Organisation:
    return Organisation(
        row["id"], row["name"], row["tier"], row["custom_limits"], row["created_at"]
    )


def _api_key(row: dict[str, Any]) -> ApiKey:
    return ApiKey(
        id=row["id"],
        environment_id=row["environment_id"],
        name=row["name"],
        hint=row["hint"],
        scopes=tuple(row["scopes"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
        last_used_at=row["last_used_at"],
    )


def _check_tier(tier: str) -> None:
    if tier not in TIERS:
        raise ValidationFailed(f"tier must be one of {', '.join(TIERS)}", field="tier")


async def create_organisation(
    conn: Conn,
    name: str,
    owner_email: str,
    owner_password: str,
    tier: str = "developer",
    project_name: str = "default",
    *,
    issue_keys: bool = True,
) -> NewOrganisation:
    """A tenant with its owner, a default project, its three environments and one key each
    (no keys with ``issue_keys=False``: nobody would ever see their secrets)."""
    _check_tier(tier)
    name = check_name(name, "organisation name")
    project_name = check_name(project_name, "project name")
    _check_user(owner_email.strip(), owner_password)  # before anything is written
    org_row = await (
        await conn.execute(
            q.INSERT_ORGANISATION,
            {"id": new_id("org"), "name": name, "tier": tier, "custom_limits": None},
        )
    ).fetchone()
    assert org_row is not None
    organisation = _organisation(org_row)
    owner_id = await create_user(conn, owner_email, owner_password)
    await add_member(conn, organisation.id, owner_id, "owner")
    project = await create_project(conn, organisation.id, project_name)
    issued = {
        env.name: await create_key(conn, env.id, name="default")
        for env in project.environments
        if issue_keys
    }
    return NewOrganisation(organisation, owner_id, owner_email, project, issued)


async def sign_up(conn: Conn, organisation_name: str, email: str, password: str) -> NewOrganisation:
    """A dashboard sign-up: a new organisation owned by a new user, with its default project and
    three environments, and no API keys yet (the owner creates them, and sees them, on the
    dashboard). Fields are checked before anything is written."""
    name = check_name(organisation_name, "organisation name")
    _check_user(email.strip(), password)
    return await create_organisation(conn, name, email.strip(), password, issue_keys=False)


async def get_organisation(conn: Conn, organisation_id: str) -> Organisation:
    """One organisation, or :class:`OrganisationNotFound`."""
    row = await (await conn.execute(q.SELECT_ORGANISATION, {"id": organisation_id})).fetchone()
    if row is None:
        raise OrganisationNotFound(organisation_id)
    return _organisation(row)


async def list_organisations(conn: Conn) -> list[dict[str, Any]]:
    """Every organisation with its project count (operator view)."""
    rows = await (await conn.execute(q.LIST_ORGANISATIONS)).fetchall()
    return [dict(row) for row in rows]


async def set_tier(
    conn: Conn, organisation_id: str, tier: str, custom_limits: dict[str, Any] | None = None
) -> Organisation:
    """Change an organisation's tier (and an Enterprise organisation's custom limits)."""
    _check_tier(tier)
    custom = validate_custom_limits(custom_limits) if custom_limits else None
    if custom and tier != "enterprise":
        raise ValidationFailed(
            "custom limits apply to the enterprise tier only", field="customLimits"
        )
    row = await (
        await conn.execute(
            q.UPDATE_TIER,
            {
                "id": organisation_id,
                "tier": tier,
                "custom_limits": Jsonb(custom) if custom else None,
            },
        )
    ).fetchone()
    if row is None:
        raise OrganisationNotFound(organisation_id)
    return _organisation(row)


async def create_user(conn: Conn, email: str, password: str) -> str:
    """A user with an argon2id password hash; returns its id."""
    email = email.strip()
    _check_user(email, password)
    # argon2 takes tens of milliseconds: off the event loop, as sign-in's verify is.
    password_hash = await asyncio.to_thread(hash_password, password)
    row = await (
        await conn.execute(
            q.INSERT_USER,
            {"id": new_id("usr"), "email": email, "password_hash": password_hash},
        )
    ).fetchone()
    if row is None:
        raise EmailTaken(email)
    return str(row["id"])


def check_name(raw: str, what: str, limit: int = MAX_NAME) -> str:
    """An organisation or project name without its outer spaces: 1 to ``limit`` characters, no
    NUL (:class:`ValidationFailed` naming ``what`` otherwise)."""
    name = raw.strip()
    if not 1 <= len(name) <= limit:
        raise ValidationFailed(
            f"{what} must be 1 to {limit} characters, not blank (got {len(name)})", field="name"
        )
    if has_nul(name):
        raise ValidationFailed(f"{what} cannot contain a NUL character", field="name")
    return name


def _check_user(email: str, password: str) -> None:
    if "@" not in email or len(email) > 320 or has_nul(email):
        raise ValidationFailed("email is not a valid address", field="email")
    check_password(password)


def check_password(password: str) -> None:
    """A password a user may choose: :data:`MIN_PASSWORD_LENGTH` to
    :data:`~tenants.sessions.MAX_PASSWORD_LENGTH` characters, no NUL."""
    if has_nul(password):
        raise ValidationFailed("password cannot contain a NUL character", field="password")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise ValidationFailed(
            f"password needs at least {MIN_PASSWORD_LENGTH} characters", field="password"
        )
    if len(password) > MAX_PASSWORD_LENGTH:
        raise ValidationFailed(
            f"password must be at most {MAX_PASSWORD_LENGTH} characters", field="password"
        )


async def add_member(conn: Conn, organisation_id: str, user_id: str, role: str) -> None:
    """Give a user a role in an organisation."""
    if role not in ROLES:
        raise ValidationFailed(f"role must be one of {', '.join(ROLES)}", field="role")
    await conn.execute(
        q.INSERT_MEMBERSHIP, {"organisation_id": organisation_id, "user_id": user_id, "role": role}
    )


async def create_project(conn: Conn, organisation_id: str, name: str) -> Project:
    """A project with its development, staging and production environments."""
    name = check_name(name, "project name")
    await get_organisation(conn, organisation_id)
    row = await (
        await conn.execute(
            q.INSERT_PROJECT,
            {"id": new_id("prj"), "organisation_id": organisation_id, "name": name},
        )
    ).fetchone()
    if row is None:
        raise ValidationFailed(f"a project named '{name}' already exists", field="name")
    environments = []
    for env_name in ENVIRONMENT_NAMES:
        params = {
            "id": new_id("env"),
            "organisation_id": organisation_id,
            "project_id": row["id"],
            "name": env_name,
        }
        env_row = await (await conn.execute(q.INSERT_ENVIRONMENT, params)).fetchone()
        assert env_row is not None
        environments.append(Environment(**env_row))
    return Project(row["id"], organisation_id, row["name"], row["created_at"], tuple(environments))


async def list_projects(conn: Conn, organisation_id: str) -> list[Project]:
    """An organisation's projects with their environments."""
    projects = []
    for row in await (
        await conn.execute(q.LIST_PROJECTS, {"organisation_id": organisation_id})
    ).fetchall():
        envs = await (await conn.execute(q.LIST_ENVIRONMENTS, {"project_id": row["id"]})).fetchall()
        projects.append(
            Project(
                row["id"],
                row["organisation_id"],
                row["name"],
                row["created_at"],
                tuple(Environment(**e) for e in envs),
            )
        )
    return projects


async def get_project(conn: Conn, organisation_id: str, project_id: str) -> Project:
    """One project of the organisation, or :class:`ProjectNotFound`."""
    for project in await list_projects(conn, organisation_id):
        if project.id == project_id:
            return project
    raise ProjectNotFound(project_id)


def _normalise_scopes(scopes: Iterable[str] | None) -> list[str]:
    chosen = list(dict.fromkeys(scopes)) if scopes else list(key_format.SCOPES)
    unknown = [s for s in chosen if s not in key_format.SCOPES]
    if unknown or not chosen:
        raise ValidationFailed(
            f"scopes must be a non-empty subset of {', '.join(key_format.SCOPES)}", field="scopes"
        )
    return chosen


async def create_key(
    conn: Conn,
    environment_id: str,
    *,
    name: str = "",
    scopes: Iterable[str] | None = None,
    expires_at: datetime | None = None,
) -> IssuedKey:
    """Issue a key for an environment; at most two active keys per environment."""
    chosen = _normalise_scopes(scopes)
    if expires_at is not None and expires_at <= datetime.now(UTC):
        raise ValidationFailed("expiresAt must be in the future", field="expiresAt")
    env = await (await conn.execute(q.LOCK_ENVIRONMENT, {"id": environment_id})).fetchone()
    if env is None:
        raise EnvironmentNotFound(environment_id)
    active = await (
        await conn.execute(q.COUNT_ACTIVE_KEYS, {"environment_id": environment_id})
    ).fetchone()
    if active is not None and active["n"] >= MAX_ACTIVE_KEYS:
        raise KeyLimitReached(environment_id, MAX_ACTIVE_KEYS)
    secret = key_format.generate_key(env["name"])
    params = {
        "id": new_id("key"),
        "organisation_id": env["organisation_id"],
        "project_id": env["project_id"],
        "environment_id": environment_id,
        "name": name,
        "secret_sha256": key_format.key_hash(secret),
        "hint": key_format.hint(secret),
        "scopes": chosen,
        "expires_at": expires_at,
    }
    row = await (await conn.execute(q.INSERT_KEY, params)).fetchone()
    assert row is not None
    return IssuedKey(_api_key(row), secret)


async def list_keys(conn: Conn, environment_id: str, include_revoked: bool = False) -> list[ApiKey]:
    """Keys of an environment, without secrets."""
    rows = await (
        await conn.execute(
            q.LIST_KEYS, {"environment_id": environment_id, "include_revoked": include_revoked}
        )
    ).fetchall()
    return [_api_key(row) for row in rows]


async def revoke_key(conn: Conn, environment_id: str, key_id: str) -> ApiKey:
    """Revoke a key of this environment (idempotent); another environment's key is not found."""
    row = await (
        await conn.execute(q.REVOKE_KEY, {"id": key_id, "environment_id": environment_id})
    ).fetchone()
    if row is None:
        raise KeyNotFound(key_id)
    return _api_key(row)


async def authenticate(conn: Conn, presented: str | None) -> AuthContext:
    """The context of a valid key; :class:`InvalidApiKey` for anything else, always the same."""
    if not presented or not key_format.is_well_formed(presented):
        raise InvalidApiKey
    digest = key_format.key_hash(presented)
    row = await (await conn.execute(q.SELECT_KEY_FOR_AUTH, {"secret_sha256": digest})).fetchone()
    if row is None or not hmac.compare_digest(bytes(row["secret_sha256"]), digest):
        raise InvalidApiKey
    if row["revoked_at"] is not None or (
        row["expires_at"] is not None and row["expires_at"] <= datetime.now(UTC)
    ):
        raise InvalidApiKey
    return AuthContext(
        key_id=row["key_id"],
        organisation_id=row["organisation_id"],
        project_id=row["project_id"],
        environment_id=row["environment_id"],
        environment=row["environment"],
        scopes=frozenset(row["scopes"]),
        expires_at=row["expires_at"],
    )


async def record_key_use(conn: Conn, used: dict[str, datetime]) -> None:
    """Write the last-used times collected in memory, in one statement."""
    if used:
        ids = list(used)
        await conn.execute(q.TOUCH_KEYS, {"ids": ids, "used_at": [used[i] for i in ids]})
