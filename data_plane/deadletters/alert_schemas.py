"""Wire shapes of DLQ alerts (camelCase JSON): the endpoint API and the webhook body."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from core.endpoint_urls import MAX_URL_LENGTH, URL_PATTERN

# A plain type: the service checks it (core.endpoint_urls); the document says
# which URLs it certainly accepts.
EndpointUrl = Annotated[
    str,
    msgspec.Meta(extra_json_schema={"pattern": URL_PATTERN, "maxLength": MAX_URL_LENGTH}),
]


class AlertEndpointRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """``PUT /v1/alerts/endpoint``: where alerts go; ``rotateSecret`` makes a new signing secret."""

    url: EndpointUrl
    rotate_secret: bool = False


class AlertEndpointView(msgspec.Struct, rename="camel", omit_defaults=True):
    """The environment's alert endpoint: a hint of its secret, the secret itself only when new."""

    url: str
    secret_hint: str
    created_at: datetime
    updated_at: datetime
    secret_created_at: datetime
    secret: str | None = None


class DlqThresholdReached(msgspec.Struct, rename="camel"):
    """Body of the ``dlq.threshold_reached`` webhook."""

    id: str  # the delivery id, also in the QueueCore-Delivery header
    event: str
    timestamp: str  # when the check saw the depth reach the threshold
    environment_id: str
    topic: str
    group: str
    depth: int
    threshold: int
