"""QueueCore's Python SDK, async-first: topics, publishing, consumer groups, offsets, dead letters.

Depends on httpx only. :class:`AsyncQueueCore` is the client for asyncio code;
:class:`QueueCore` is the same client for synchronous code (it runs the asynchronous one on a
private event loop)::

    from queuecore import AsyncQueueCore

    async with AsyncQueueCore("pq_live_sk_…") as pq:
        await pq.publish("order.events", {"type": "order.created"}, key="ord_1")
"""

from queuecore.client import VERSION, AsyncQueueCore
from queuecore.consumer import EVENTS, AsyncConsumer, AsyncMessage, Membership
from queuecore.errors import (
    AckRejected,
    APIConnectionError,
    APITimeoutError,
    AuthenticationError,
    Conflict,
    LeaseExpired,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    PublishOutcomeUnknown,
    QueueCoreError,
    RateLimited,
    ServerError,
    Unavailable,
    ValidationError,
)
from queuecore.models import (
    UNSET,
    BatchItem,
    BatchResult,
    ConfigEntry,
    DeadLetter,
    DeadLetterPage,
    DeadLetterPolicy,
    Fairness,
    FlowControl,
    Group,
    GroupConfig,
    GroupStats,
    GroupSummary,
    KeyStats,
    Member,
    OutgoingMessage,
    PartitionOffset,
    PartitionState,
    PublishBatching,
    PublishResult,
    PushSettings,
    ThrottleStats,
    Topic,
    TopicStats,
)
from queuecore.push import (
    PushConfig,
    PushMessage,
    PushTestResult,
    PushVerificationError,
    verify_push,
)
from queuecore.sync import Consumer, Message, QueueCore

__version__ = VERSION
__all__ = [
    "EVENTS",
    "UNSET",
    "APIConnectionError",
    "APITimeoutError",
    "AckRejected",
    "AsyncConsumer",
    "AsyncMessage",
    "AsyncQueueCore",
    "AuthenticationError",
    "BatchItem",
    "BatchResult",
    "ConfigEntry",
    "Conflict",
    "Consumer",
    "DeadLetter",
    "DeadLetterPage",
    "DeadLetterPolicy",
    "Fairness",
    "FlowControl",
    "Group",
    "GroupConfig",
    "GroupStats",
    "GroupSummary",
    "KeyStats",
    "LeaseExpired",
    "Member",
    "Membership",
    "Message",
    "NotFound",
    "OutgoingMessage",
    "PartitionOffset",
    "PartitionState",
    "PayloadTooLarge",
    "PermissionDenied",
    "PublishBatching",
    "PublishOutcomeUnknown",
    "PublishResult",
    "PushConfig",
    "PushMessage",
    "PushSettings",
    "PushTestResult",
    "PushVerificationError",
    "QueueCore",
    "QueueCoreError",
    "RateLimited",
    "ServerError",
    "ThrottleStats",
    "Topic",
    "TopicStats",
    "Unavailable",
    "ValidationError",
    "verify_push",
]
