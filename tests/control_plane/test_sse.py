"""SSE framing: what an EventSource (or any spec-following client) reads from our bytes."""

from __future__ import annotations

import json

from control_plane.api.sse import comment, event, events, retry_field


def _parse(stream: bytes) -> list[dict[str, str]]:
    """The HTML spec's event-stream interpretation, for the fields we use."""
    parsed, current = [], {}
    for line in stream.decode().splitlines():
        if not line:
            if current:
                parsed.append(current)
            current = {}
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data" and "data" in current:
                value = current["data"] + "\n" + value  # data lines of one event are joined
            current[name] = value
    return parsed


def test_a_batch_is_one_event_per_message_with_its_id_type_and_json_data() -> None:
    payloads = [{"n": 1, "text": "two\nlines"}, {"n": 2, "text": "data: not a field\r\n\r\n"}]
    stream = events("message", [("ack_a", payloads[0]), ("ack_b", payloads[1])])
    parsed = _parse(stream)
    assert [p["id"] for p in parsed] == ["ack_a", "ack_b"]
    assert {p["event"] for p in parsed} == {"message"}
    assert [json.loads(p["data"]) for p in parsed] == payloads


def test_error_event_and_keepalive_comment() -> None:
    stream = comment("keepalive") + event("error", {"code": "MEMBER_NOT_FOUND", "message": "gone"})
    assert stream.startswith(b": keepalive")
    (only,) = _parse(stream)
    assert only["event"] == "error" and "id" not in only
    assert json.loads(only["data"])["code"] == "MEMBER_NOT_FOUND"


def test_the_retry_field_sets_the_reconnect_delay_and_dispatches_no_event() -> None:
    stream = retry_field(1000) + events("message", [("ack_a", {"n": 1})])
    assert stream.startswith(b"retry: 1000\r\n\r\n")
    parsed = _parse(stream)
    assert parsed[0] == {"retry": "1000"}  # a block without data: no event is dispatched
    assert [json.loads(p["data"]) for p in parsed if "data" in p] == [{"n": 1}]
