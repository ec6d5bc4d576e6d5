"""What a signed-in dashboard user may see and do: environments of their organisations, by role.

Everything is resolved from the user's memberships, never from ids alone: an environment of an
organisation the user does not belong to is :class:`EnvironmentNotFound`, exactly like one that
does not exist, so ids put into URLs reveal nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.db import Conn
from tenants import queries as q
from tenants import service
from tenants.errors import EnvironmentNotFound, Forbidden
from tenants.models import ROLES, Environment, Organisation, Project
from tenants.sessions import list_memberships

MANAGERS = frozenset({"owner", "admin"})
WRITERS = MANAGERS | {"developer"}

# action → (the roles allowed, what the action is in words)
ACTIONS: dict[str, tuple[frozenset[str], str]] = {
    "manage_keys": (MANAGERS, "create or revoke API keys"),
    "create_topics": (WRITERS, "create topics"),
    "replay_dead_letters": (WRITERS, "replay dead letters"),
    "manage_alerts": (WRITERS, "change the alert endpoint"),
    "view_usage": (MANAGERS, "see the environment's usage"),
    "send_test_messages": (WRITERS, "send test messages"),
    "manage_topics": (WRITERS, "change or delete topics and configure consumer groups"),
    "manage_members": (MANAGERS, "invite, change or remove members"),
    "view_audit": (MANAGERS, "see the audit log"),
}


def allows(role: str, action: str) -> bool:
    """Whether ``role`` may perform ``action`` (one of :data:`ACTIONS`)."""
    return role in ACTIONS[action][0]


@dataclass(frozen=True, slots=True)
class EnvironmentAccess:
    """One environment as a member sees it, with their role and the rest of the organisation."""

    user_id: str
    role: str
    organisation: Organisation
    project: Project
    environment: Environment
    projects: tuple[Project, ...]  # every project of the organisation, for switching

    def allows(self, action: str) -> bool:
        """Whether this member's role may perform ``action``."""
        return allows(self.role, action)

    def require(self, action: str) -> None:
        """:class:`Forbidden` unless this member's role may perform ``action``."""
        if not self.allows(action):
            roles, words = ACTIONS[action]
            needed = [role for role in ROLES if role in roles]
            listing = " or ".join([", ".join(needed[:-1]), needed[-1]] if needed[:-1] else needed)
            raise Forbidden(
                f"Your role in {self.organisation.name} is {self.role}; you need to be an "
                f"{listing} to {words}.",
                role=self.role,
                action=action,
            )


@dataclass(frozen=True, slots=True)
class Workspace:
    """An organisation the user belongs to, their role there, and its projects."""

    organisation_id: str
    organisation_name: str
    role: str
    projects: tuple[Project, ...]


async def environment_access(conn: Conn, user_id: str, environment_id: str) -> EnvironmentAccess:
    """The environment if the user is a member of its organisation, else ``EnvironmentNotFound``."""
    row = await (
        await conn.execute(
            q.SELECT_ENVIRONMENT_ACCESS, {"user_id": user_id, "environment_id": environment_id}
        )
    ).fetchone()
    if row is None:
        raise EnvironmentNotFound(environment_id)
    role = row.pop("role")
    environment = Environment(**row)
    projects = tuple(await service.list_projects(conn, environment.organisation_id))
    project = next(p for p in projects if p.id == environment.project_id)
    organisation = await service.get_organisation(conn, environment.organisation_id)
    return EnvironmentAccess(user_id, role, organisation, project, environment, projects)


async def organisation_of_environment(conn: Conn, environment_id: str) -> str:
    """The id of the organisation an environment belongs to."""
    row = await (await conn.execute(q.LOCK_ENVIRONMENT, {"id": environment_id})).fetchone()
    if row is None:
        raise EnvironmentNotFound(environment_id)
    return str(row["organisation_id"])


async def workspaces(conn: Conn, user_id: str) -> list[Workspace]:
    """Every organisation of the user, oldest first, with its projects and environments."""
    return [
        Workspace(
            m.organisation_id,
            m.organisation_name,
            m.role,
            tuple(await service.list_projects(conn, m.organisation_id)),
        )
        for m in await list_memberships(conn, user_id)
    ]
