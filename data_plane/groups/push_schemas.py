"""Wire shapes of a push group's settings (camelCase JSON): ``"push"`` of a group's PUT."""

from __future__ import annotations

from typing import Annotated

import msgspec

from core.wire_types import duration_json_schema
from data_plane.deadletters.endpoint_urls import HTTPS_URL_PATTERN, MAX_URL_LENGTH

TIMEOUT_MS = (1_000, 600_000)  # 1 s .. 10 min


class PushConfigRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Deliver the group to an HTTPS endpoint: each message is a signed ``POST``, acked by a 2xx."""

    endpoint: Annotated[
        str,  # checked by the service (data_plane.deadletters.endpoint_urls)
        msgspec.Meta(
            extra_json_schema={"pattern": HTTPS_URL_PATTERN, "maxLength": MAX_URL_LENGTH},
            description=(
                "https URL every message is POSTed to (http and private addresses only where "
                "QUEUECORE_WEBHOOKS_ALLOW_PRIVATE is set)"
            ),
        ),
    ]
    max_in_flight: Annotated[
        int, msgspec.Meta(ge=1, le=1000, description="POSTs in flight at once, across pushers")
    ] = 10
    timeout: Annotated[
        str | int,
        msgspec.Meta(
            description="how long a POST may take before it counts as failed (≤ 10m)",
            extra_json_schema=duration_json_schema(*TIMEOUT_MS),
        ),
    ] = "30s"
    ordered: Annotated[
        bool,
        msgspec.Meta(
            description="one POST in flight per key (per partition for keyless messages), in order"
        ),
    ] = False
    rotate_secret: Annotated[
        bool, msgspec.Meta(description="make a new signing secret (answered once as pushSecret)")
    ] = False


class PushTestResult(msgspec.Struct, rename="camel"):
    """``POST …/groups/{group}/push/test``: what the endpoint answered a signed test push."""

    delivered: bool  # a 2xx within the timeout (at most 10 s)
    status_code: int | None  # the answer's status, None when there was none
    error: str | None  # why it failed: "HTTP 500", "timed out after 10s", "ConnectError: …"
    elapsed_ms: int
