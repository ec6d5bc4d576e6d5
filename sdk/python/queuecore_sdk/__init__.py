"""QueueCore's Python SDK: topics, publishing, consumer groups, offsets and dead letters.

Depends on httpx only. Start with :class:`QueueCore`::

    from queuecore_sdk import QueueCore

    with QueueCore("pq_live_sk_…") as pq:
        pq.publish("order.events", {"type": "order.created"}, key="ord_1")
"""

from queuecore_sdk.client import VERSION, QueueCore
from queuecore_sdk.consumer import Consumer, Membership, Message
from queuecore_sdk.errors import (
    AckRejected,
    APIConnectionError,
    APITimeoutError,
    AuthenticationError,
    Conflict,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    QueueCoreError,
    RateLimited,
    ServerError,
    Unavailable,
    ValidationError,
)
from queuecore_sdk.models import (
    BatchItem,
    BatchResult,
    DeadLetter,
    DeadLetterPage,
    DeadLetterPolicy,
    Group,
    GroupConfig,
    GroupSummary,
    Member,
    OutgoingMessage,
    PartitionOffset,
    PartitionState,
    PublishResult,
    Topic,
    TopicStats,
)

__version__ = VERSION
__all__ = [
    "APIConnectionError",
    "APITimeoutError",
    "AckRejected",
    "AuthenticationError",
    "BatchItem",
    "BatchResult",
    "Conflict",
    "Consumer",
    "DeadLetter",
    "DeadLetterPage",
    "DeadLetterPolicy",
    "Group",
    "GroupConfig",
    "GroupSummary",
    "Member",
    "Membership",
    "Message",
    "NotFound",
    "OutgoingMessage",
    "PartitionOffset",
    "PartitionState",
    "PayloadTooLarge",
    "PermissionDenied",
    "PublishResult",
    "QueueCore",
    "QueueCoreError",
    "RateLimited",
    "ServerError",
    "Topic",
    "TopicStats",
    "Unavailable",
    "ValidationError",
]
