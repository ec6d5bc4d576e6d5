"""The Python SDK's stream parser reads the server's stream start (``retry:``) and its drain end."""

from __future__ import annotations

import json

from queuecore._sse import LineSplitter, sse_events

from control_plane.api.sse import event, events, retry_field


def test_the_sdk_skips_the_retry_field_and_reads_the_events_after_it() -> None:
    wire = (
        retry_field(1000)
        + events("message", [("ack_a", {"n": 1})])
        + event(
            "error", {"code": "SERVICE_UNAVAILABLE", "message": "server shutting down, reconnect"}
        )
    )
    lines = LineSplitter().feed(wire.decode())
    parsed = [(kind, json.loads(data)) for kind, data in sse_events(lines)]
    assert parsed == [
        ("message", {"n": 1}),
        ("error", {"code": "SERVICE_UNAVAILABLE", "message": "server shutting down, reconnect"}),
    ]
