"""An organisation's team and audit log: members and roles, invitations, removals.

Everyone in the organisation sees its members; owners and admins invite, change roles and
remove (only an owner touches the owner role, and the last owner stays). The audit log is for
owners and admins. Every rule is the team service's; these handlers parse, call and render.
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter

from control_plane.dashboard.pages import PREFIX, field, form_fields, page, redirect
from control_plane.dashboard.sessions import require_csrf, require_session, session_of
from control_plane.edge.errors import status_for
from core.errors import Conflict, ValidationFailed
from tenants.models import ROLES
from tenants.team.models import OrganisationAccess
from tenants.team.service import Delivery, TeamService

NO_STORE = {"Cache-Control": "no-store"}
AUDIT_PAGE = 50


def org_path(organisation_id: str, *parts: str) -> str:
    """``/dashboard/orgs/{id}/…``."""
    return "/".join([PREFIX, "orgs", organisation_id, *parts])


async def organisation(
    request: Request[Any, Any, Any], team: TeamService, org_id: str
) -> OrganisationAccess:
    """The signed-in user's standing in the organisation (404 unless a member)."""
    session = session_of(request)
    return await team.organisation(session.user_id, session.email, org_id)


class TeamPages(Controller):
    """``/dashboard/orgs/{org}/members`` and ``…/audit``."""

    path = "/dashboard/orgs/{org_id:str}"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @get("/members")
    async def members(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        org_id: FromPath[str],
    ) -> Response[Any]:
        """Members with their roles, pending invitations, the invite form."""
        return await render_team(request, team, await organisation(request, team, org_id))

    @post("/invitations")
    async def invite(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        org_id: FromPath[str],
    ) -> Response[Any]:
        """Invite an address with a role; the page shows the link when no email could go."""
        org = await organisation(request, team, org_id)
        fields = await form_fields(request)
        form = {"email": field(fields, "email"), "role": field(fields, "role")}
        try:
            delivery = await team.invite(org, form["email"], form["role"])
        except (ValidationFailed, Conflict) as exc:
            return await render_team(
                request, team, org, status=status_for(exc), error=exc.message, form=form
            )
        if delivery.emailed:
            return redirect(org_path(org_id, "members"), notice="invited")
        return await render_team(request, team, org, status=201, delivery=delivery)

    @post("/invitations/{invitation_id:str}/revoke")
    async def revoke_invitation(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        org_id: FromPath[str],
        invitation_id: FromPath[str],
    ) -> Response[Any]:
        """Withdraw a pending invitation: its link stops working."""
        await team.revoke_invitation(await organisation(request, team, org_id), invitation_id)
        return redirect(org_path(org_id, "members"), notice="invitation-revoked")

    @post("/members/{user_id:str}/role")
    async def change_role(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        org_id: FromPath[str],
        user_id: FromPath[str],
    ) -> Response[Any]:
        """Give a member another role (never leaving the organisation without an owner)."""
        org = await organisation(request, team, org_id)
        role = field(await form_fields(request), "role")
        try:
            await team.change_role(org, user_id, role)
        except (ValidationFailed, Conflict) as exc:
            return await render_team(request, team, org, status=status_for(exc), error=exc.message)
        return redirect(org_path(org_id, "members"), notice="role-changed")

    @get("/members/{user_id:str}/remove")
    async def confirm_removal(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        org_id: FromPath[str],
        user_id: FromPath[str],
    ) -> Response[Any]:
        """Ask before removing: the member is signed out at once."""
        org = await organisation(request, team, org_id)
        org_members, _ = await team.members(org)
        member = next((m for m in org_members if m.user_id == user_id), None)
        if member is None:
            return redirect(org_path(org_id, "members"))
        return page(request, "member_remove.html", org=org, member=member, section="team")

    @post("/members/{user_id:str}/remove")
    async def remove(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        org_id: FromPath[str],
        user_id: FromPath[str],
    ) -> Response[Any]:
        """Remove the member and end every session of theirs."""
        org = await organisation(request, team, org_id)
        try:
            await team.remove_member(org, user_id)
        except Conflict as exc:
            return await render_team(request, team, org, status=status_for(exc), error=exc.message)
        if user_id == org.user_id:  # left: this browser's session ended with the others
            return redirect(f"{PREFIX}/login", notice="session-ended")
        return redirect(org_path(org_id, "members"), notice="member-removed")

    @get("/audit")
    async def audit(
        self,
        request: Request[Any, Any, Any],
        team: NamedDependency[TeamService],
        org_id: FromPath[str],
        before: Annotated[int | None, QueryParameter(ge=1)] = None,
    ) -> Response[Any]:
        """Who did what, newest first, :data:`AUDIT_PAGE` a page."""
        org = await organisation(request, team, org_id)
        events = await team.audit_log(org, before, AUDIT_PAGE)
        older = events[-1].id if len(events) == AUDIT_PAGE else None
        return page(
            request,
            "audit.html",
            org=org,
            section="audit",
            events=events,
            before=before,
            older=older,
        )


async def render_team(
    request: Request[Any, Any, Any],
    team: TeamService,
    org: OrganisationAccess,
    *,
    status: int = 200,
    error: str | None = None,
    form: dict[str, str] | None = None,
    delivery: Delivery | None = None,
) -> Response[Any]:
    """The team page (never cached: it may carry an invitation link)."""
    org_members, pending = await team.members(org)
    return page(
        request,
        "team.html",
        status=status,
        org=org,
        headers=NO_STORE,
        section="team",
        error=error,
        members=org_members,
        pending=pending,
        roles=ROLES,
        form=form or {"email": "", "role": "developer"},
        delivery=delivery,
        owners=sum(1 for m in org_members if m.role == "owner"),
    )
