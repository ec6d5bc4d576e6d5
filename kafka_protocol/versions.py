"""The APIs and versions this listener serves, as ApiVersions reports them.

Each range is what librdkafka 2.x, kafka-python 3 and aiokafka negotiate, within what ``kio``
has message types for, stopping short of versions that name topics by id only (Fetch 13+,
Metadata 10+ topic ids are not kept) or batch several groups in one request.
"""

from __future__ import annotations

from enum import IntEnum


class Api(IntEnum):
    """Kafka API keys served here."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    SASL_AUTHENTICATE = 36


SUPPORTED: dict[int, tuple[int, int]] = {
    Api.PRODUCE: (3, 9),
    Api.FETCH: (4, 12),
    Api.LIST_OFFSETS: (1, 7),
    Api.METADATA: (1, 9),
    Api.OFFSET_COMMIT: (2, 8),
    Api.OFFSET_FETCH: (1, 7),
    Api.FIND_COORDINATOR: (0, 3),
    Api.JOIN_GROUP: (0, 7),
    Api.HEARTBEAT: (0, 4),
    Api.LEAVE_GROUP: (0, 4),
    Api.SYNC_GROUP: (0, 5),
    Api.DESCRIBE_GROUPS: (0, 5),
    Api.LIST_GROUPS: (0, 4),
    Api.SASL_HANDSHAKE: (0, 1),
    Api.API_VERSIONS: (0, 3),
    Api.CREATE_TOPICS: (2, 5),
    Api.DELETE_TOPICS: (1, 5),
    Api.INIT_PRODUCER_ID: (0, 4),
    Api.SASL_AUTHENTICATE: (0, 2),
}

BEFORE_AUTHENTICATION = frozenset({Api.API_VERSIONS, Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE})


def supports(api_key: int, version: int) -> bool:
    """Whether this listener serves the API at this version."""
    low, high = SUPPORTED.get(api_key, (0, -1))
    return low <= version <= high
