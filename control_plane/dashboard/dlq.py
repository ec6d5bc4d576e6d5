"""A consumer group's dead-letter queue: inspect page by page, replay one, replay all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath

from control_plane.dashboard.pages import env_path, page, redirect
from control_plane.dashboard.scope import caller, environment
from control_plane.dashboard.sessions import require_csrf, require_session
from control_plane.edge.errors import status_for
from control_plane.edge.resources import data_plane_of
from data_plane.service import (
    DeadLetterNotFound,
    DeadLetterReplayed,
    DeadLetterView,
    GroupRef,
    format_duration_ms,
)

EXPIRED = "ack timeout expired"  # what delivery records for a lease that ran out (pulls.py)
PAGE_SIZE = 20
MAX_DATA_CHARS = 2000  # of a message's data shown in the table


def dlq_path(env_id: str, topic: str, group: str) -> str:
    """The DLQ page of a group."""
    return env_path(env_id, "topics", topic, "groups", group, "dlq")


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a message was dead-lettered, in words, and which group setting governs it."""

    summary: str
    explanation: str
    setting: str  # the group settings form's field that changes this outcome


def explain(error: str | None, ref: GroupRef) -> Reason:
    """What a dead letter's error means, with the group's current settings in the words."""
    retries = ref.max_retries
    if error == EXPIRED:
        return Reason(
            "No ack in time",
            f"Each of its {retries + 1} deliveries was held past the group's ack timeout "
            f"({format_duration_ms(int(ref.ack_timeout_s * 1000))}) without an ack or nack: the "
            "handler is slower than that, or the consumer stopped or crashed holding it. Raise "
            "the ack timeout, extend the lease while working, or make the handler ack sooner.",
            "group-ack-timeout",
        )
    if error:
        return Reason(
            "Nacked by the consumer",
            f"The consumer rejected it with this error on its last delivery, after {retries} "
            f"retries (the first {format_duration_ms(ref.retry_delay_ms)} after the first "
            "nack, each next twice as long).",
            "group-max-retries",
        )
    return Reason(
        "Nacked without an error",
        f"The consumer rejected it without saying why, after {retries} retries. Pass an error "
        "to nack so the reason shows here.",
        "group-max-retries",
    )


def data_text(view: DeadLetterView) -> str:
    """A dead letter's data as JSON text, cut to :data:`MAX_DATA_CHARS`."""
    text = bytes(view.data).decode(errors="replace")
    return text if len(text) <= MAX_DATA_CHARS else text[:MAX_DATA_CHARS] + "…"


class DeadLetterPages(Controller):
    """``…/groups/{group}/dlq``: everyone inspects; owners, admins and developers replay."""

    path = "/dashboard/envs/{env_id:str}/topics/{topic:str}/groups/{group:str}/dlq"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @get("/")
    async def inspect(
        self,
        request: Request[Any, Any, Any],
        env_id: FromPath[str],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> Response[Any]:
        """Oldest first, :data:`PAGE_SIZE` a page; ``?after=`` a message id continues."""
        return await render_dlq(request, env_id, topic, group)

    @post("/replay")
    async def replay_all(
        self,
        request: Request[Any, Any, Any],
        env_id: FromPath[str],
        topic: FromPath[str],
        group: FromPath[str],
    ) -> Response[Any]:
        """Deliver every dead letter to the group's consumers again."""
        access = await environment(request, env_id, "replay_dead_letters")
        replayed = await data_plane_of(request.app).dead_letters.replay_all(
            caller(access), topic, group
        )
        return redirect(dlq_path(env_id, topic, group), notice="replayed", count=replayed.replayed)

    @post("/{message_id:str}/replay")
    async def replay_one(
        self,
        request: Request[Any, Any, Any],
        env_id: FromPath[str],
        topic: FromPath[str],
        group: FromPath[str],
        message_id: FromPath[str],
    ) -> Response[Any]:
        """Deliver one dead letter again; one already replayed or gone is explained."""
        access = await environment(request, env_id, "replay_dead_letters")
        try:
            await data_plane_of(request.app).dead_letters.replay_one(
                caller(access), topic, group, message_id
            )
        except (DeadLetterNotFound, DeadLetterReplayed) as exc:
            return await render_dlq(
                request, env_id, topic, group, status=status_for(exc), error=exc.message
            )
        return redirect(dlq_path(env_id, topic, group), notice="replayed", count=1)


async def render_dlq(
    request: Request[Any, Any, Any],
    env_id: str,
    topic: str,
    group: str,
    *,
    status: int = 200,
    error: str | None = None,
) -> Response[Any]:
    """One page of the queue, with its depth."""
    after = request.query_params.get("after") or None
    access = await environment(request, env_id)
    data_plane = data_plane_of(request.app)
    ref = await data_plane.groups.settings(caller(access), topic, group)
    listing = await data_plane.dead_letters.inspect(caller(access), topic, group, PAGE_SIZE, after)
    return page(
        request,
        "dlq.html",
        status=status,
        access=access,
        section="topics",
        error=error,
        topic=topic,
        group=group,
        listing=listing,
        rows=[(view, data_text(view), explain(view.error, ref)) for view in listing.messages],
        settings_path=env_path(env_id, "topics", topic, "groups", group) + "#settings",
        after=after,
        dlq_path=dlq_path(env_id, topic, group),
    )
