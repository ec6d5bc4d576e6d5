"""A topic's messages in the dashboard: the read-only browser of a partition (by offset or by
time, a page at a time) and the test message form of the topic page."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from control_plane.dashboard.pages import env_path, field, form_fields, page, redirect
from control_plane.dashboard.scope import caller, environment
from control_plane.dashboard.sessions import require_csrf, require_session
from control_plane.dashboard.topic_page import SEND_FORM_DEFAULTS, render_topic
from control_plane.edge.bodies import read_form
from control_plane.edge.errors import status_for
from core.errors import ValidationFailed
from data_plane.service import (
    DataPlane,
    MessageTooLarge,
    OffsetOutOfRange,
    PartitionNotFound,
    PublishRequest,
    ReadResult,
    StoredMessage,
    iso_timestamp,
)

PAGE_SIZE = 20
MAX_DATA_CHARS = 2000  # of a message's data shown in the table
ONE_LINE_CHARS = 80
MAX_OFFSET_DIGITS = 18


@dataclass(frozen=True, slots=True)
class MessageRow:
    """A stored message as the browser prints it."""

    offset: int
    timestamp: str
    key: str | None
    headers: dict[str, str]
    data: str


def readable_data(raw: bytes) -> str:
    """Stored JSON as the browser shows it: as stored when short, indented (one member a line,
    so it wraps between values, never inside one) when longer than :data:`ONE_LINE_CHARS`."""
    text = raw.decode(errors="replace")
    if len(text) <= ONE_LINE_CHARS:
        return text
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def message_row(stored: StoredMessage) -> MessageRow:
    """The printable form of a message: data as JSON text, cut to :data:`MAX_DATA_CHARS`."""
    message = stored.message
    data = readable_data(bytes(message.value))
    return MessageRow(
        offset=stored.offset,
        timestamp=iso_timestamp(message.timestamp_ms),
        key=None if message.key is None else message.key.decode(errors="replace"),
        headers=message.headers,
        data=data if len(data) <= MAX_DATA_CHARS else data[:MAX_DATA_CHARS] + "…",
    )


def messages_path(env_id: str, topic: str, partition: int) -> str:
    """The browser page of a partition."""
    return env_path(env_id, "topics", topic, "partitions", str(partition), "messages")


def parse_offset(text: str) -> int | None:
    """``?offset=`` as a number ('' is the earliest retained offset)."""
    if not text:
        return None
    if not text.isdigit() or len(text) > MAX_OFFSET_DIGITS:
        raise ValidationFailed("offset must be a whole number", field="offset")
    return int(text)


def parse_moment(text: str) -> int:
    """``?at=`` (``YYYY-MM-DDTHH:MM[:SS]``, UTC unless it names an offset) in epoch ms."""
    try:
        moment = datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError:
        raise ValidationFailed(
            "at must be a date and time such as 2026-11-26T22:15 (UTC)", field="at"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_headers(text: str) -> dict[str, str]:
    """Header lines ``name=value``; blank lines are skipped."""
    headers = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise ValidationFailed(f"headers: line {number} is not name=value", field="headers")
        headers[name.strip()] = value.strip()
    return headers


def parse_send_form(form: dict[str, str]) -> PublishRequest:
    """The test message form as the API's publish request, checked by the same schema."""
    text = form["data"].strip()
    if not text:
        raise ValidationFailed("data is required", field="data")
    try:
        data: Any = msgspec.json.decode(text)
    except msgspec.DecodeError:
        data = text  # not JSON: sent as a JSON string
    body = {"data": data, "key": form["key"] or None, "headers": parse_headers(form["headers"])}
    try:
        return msgspec.convert(body, PublishRequest)
    except msgspec.ValidationError as exc:
        raise ValidationFailed(f"The message is not valid: {exc}") from None


def paging(result: ReadResult) -> dict[str, Any]:
    """Where a page starts, the partition's bounds, and the offsets of the pages around it."""
    start = result.messages[0].offset if result.messages else result.next_offset
    earliest, latest = result.earliest_offset, result.latest_offset
    return {
        "offset": start,
        "earliest": earliest,
        "latest": latest,
        "next_offset": result.next_offset if result.next_offset < latest else None,
        "previous_offset": max(start - PAGE_SIZE, earliest) if start > earliest else None,
    }


async def send_form(request: Request[Any, Any, Any]) -> dict[str, str]:
    """The test message form's fields; ``data`` uncut (the tier's message size limit applies,
    as for the API), the others cut as every dashboard field is."""
    fields = await form_fields(request)
    form = {key: field(fields, key, strip=False) for key in SEND_FORM_DEFAULTS}
    form["data"] = ((await read_form(request)).get("data") or [""])[0]
    return form


class MessagePages(Controller):
    """``…/topics/{topic}``'s messages: everyone browses; owners, admins and developers send."""

    path = "/dashboard/envs/{env_id:str}/topics/{topic:str}"
    guards = [require_session, require_csrf]
    include_in_schema = False

    @get("/partitions/{partition:int}/messages")
    async def browse(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
        topic: FromPath[str],
        partition: FromPath[int],
    ) -> Response[Any]:
        """:data:`PAGE_SIZE` messages from ``?offset=`` or from the first at or after ``?at=``."""
        if partition < 0:
            raise PartitionNotFound(topic, partition)
        at = request.query_params.get("at", "").strip()
        access = await environment(request, env_id)
        offset = parse_offset(request.query_params.get("offset", "").strip())
        if at:
            offset = await data_plane.offset_at(caller(access), topic, partition, parse_moment(at))
        context: dict[str, Any] = {
            "page_size": PAGE_SIZE,
            "topic": topic,
            "partition": partition,
            "at": at,
            "path": messages_path(env_id, topic, partition),
            "topic_path": env_path(env_id, "topics", topic),
        }
        try:
            ref, result = await data_plane.browse(
                caller(access), topic, partition, offset, PAGE_SIZE
            )
        except OffsetOutOfRange as exc:
            return page(
                request,
                "messages.html",
                status=status_for(exc),
                access=access,
                section="topics",
                error=exc.message,
                rows=[],
                offset=offset,
                earliest=exc.data["earliest"],
                latest=exc.data["latest"],
                next_offset=None,
                previous_offset=None,
                partitions=None,
                **context,
            )
        return page(
            request,
            "messages.html",
            access=access,
            section="topics",
            rows=[message_row(stored) for stored in result.messages],
            partitions=ref.partitions,
            **paging(result),
            **context,
        )

    @post("/messages")
    async def send(
        self,
        request: Request[Any, Any, Any],
        data_plane: NamedDependency[DataPlane],
        env_id: FromPath[str],
        topic: FromPath[str],
    ) -> Response[Any]:
        """Publish one message through the API's publish service; show where it was stored."""
        form = await send_form(request)
        access = await environment(request, env_id, "send_test_messages")
        try:
            message = parse_send_form(form)
            [stored] = await data_plane.publish(caller(access), topic, [message])
        except (ValidationFailed, MessageTooLarge) as exc:
            return await render_topic(
                request, env_id, topic, status=status_for(exc), error=exc.message, form=form
            )
        return redirect(
            messages_path(env_id, topic, stored.partition),
            notice="message-sent",
            count=stored.offset,
            offset=stored.offset,
        )
