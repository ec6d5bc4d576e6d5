"""The one door to the data plane: what every edge (HTTP controllers, dashboard pages, Celery
tasks, a listener speaking another protocol) calls, and all it imports of the data plane.

:class:`DataPlane` serves a process's callers: publish and batch, pull and stream, ack, nack and
extend, browse, and through ``topics``, ``groups`` and ``dead_letters`` their administration.
:class:`Upkeep` is the background work a worker runs. Inputs are typed (a :class:`Caller` says
which tenant environment a call is for; requests are msgspec Structs), results are typed, and
errors are ``core.errors`` types carrying their data, which each edge maps to its protocol in one
place. Everything else in ``data_plane`` is internal to it (``tests/infra/test_layers.py``).
"""

from data_plane.config.service import KEY_PATTERN as CONFIG_KEY_PATTERN
from data_plane.config.service import ConfigEntry, ConfigList, ConfigValue
from data_plane.deadletters.alert_schemas import AlertEndpointRequest, AlertEndpointView
from data_plane.deadletters.alerts import AlertEndpoint, AlertEndpointNotFound
from data_plane.deadletters.service import (
    MAX_PAGE as MAX_DEAD_LETTER_PAGE,
)
from data_plane.deadletters.service import (
    DeadLetterNotFound,
    DeadLetterPage,
    DeadLetterReplayed,
    DeadLetterView,
    Replayed,
    ReplayRequest,
)
from data_plane.delivery import AckOutcome, AckRejected, Delivery, GroupRef, Pulled
from data_plane.delivery.acks import MAX_EXTEND_S
from data_plane.delivery.stats import GroupStats, KeyStats, ThrottleStats
from data_plane.errors import (
    MessageTooLarge,
    PublishOutcomeUnknown,
    QuotaExceeded,
    TopicExists,
    TopicNotFound,
)
from data_plane.groups.classic import GroupError
from data_plane.groups.classic import JoinRequest as ClassicJoinRequest
from data_plane.groups.lag import LagPoint, LagSeries
from data_plane.groups.push_schemas import PushConfigRequest, PushTestResult
from data_plane.groups.schemas import (
    GroupConfigRequest,
    GroupSummary,
    GroupView,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinRequest,
    JoinResponse,
    RetryDelay,
    Window,
)
from data_plane.groups.service import GROUP_NAME, format_duration_ms
from data_plane.push.config import PushSettings, PushTarget
from data_plane.push.failures import PushFailure
from data_plane.push.sender import PushBody, PushOutcome, PushSender
from data_plane.push.sender import body_of as push_body
from data_plane.read.reader import (
    OffsetOutOfRange,
    PartitionNotFound,
    ReadResult,
    StoredMessage,
    TopicRef,
)
from data_plane.read.schemas import (
    ENCODINGS,
    DeliveredMessage,
    MessagePage,
    iso_timestamp,
    message_page,
    scheduling,
)
from data_plane.service.consuming import KEEPALIVE_S, Stream
from data_plane.service.plane import DataPlane, NackItem, NackOutcome
from data_plane.service.push import Push, Pusher
from data_plane.service.scope import Caller, Scope
from data_plane.service.upkeep import LAG_BUCKET_S, SETTLED_ACK_GRACE_S, SNAPSHOT_KEEP_S, Upkeep
from data_plane.service.views import group_view
from data_plane.topics.overview import GroupDetail, TopicDetail, TopicSummary
from data_plane.topics.schemas import (
    BatchItemResult,
    BatchPublishRequest,
    BatchPublishResult,
    CreateTopicRequest,
    IdempotencyKey,
    PublishRequest,
    PublishResult,
    TopicList,
    TopicView,
    UpdateTopicRequest,
)
from data_plane.topics.service import DELIVERIES, LATENCY_CLASSES, MAX_NAME_LENGTH, NAME_PATTERN
from data_plane.topics.traffic import WINDOWS, TrafficSeries, TrafficWindow
from data_plane.write.publish import Published, TopicRoute, message_id
from data_plane.write.records import Appended, OutOfOrderSequence, ProducerBatch
from data_plane.write.records import PartitionNotFound as NoSuchPartition
from data_plane.write.segment import BYTES, JSON, NULL, Message

__all__ = [
    "BYTES",
    "CONFIG_KEY_PATTERN",
    "DELIVERIES",
    "ENCODINGS",
    "GROUP_NAME",
    "JSON",
    "KEEPALIVE_S",
    "LAG_BUCKET_S",
    "LATENCY_CLASSES",
    "MAX_DEAD_LETTER_PAGE",
    "MAX_EXTEND_S",
    "MAX_NAME_LENGTH",
    "NAME_PATTERN",
    "NULL",
    "SETTLED_ACK_GRACE_S",
    "SNAPSHOT_KEEP_S",
    "WINDOWS",
    "AckOutcome",
    "AckRejected",
    "AlertEndpoint",
    "AlertEndpointNotFound",
    "AlertEndpointRequest",
    "AlertEndpointView",
    "Appended",
    "BatchItemResult",
    "BatchPublishRequest",
    "BatchPublishResult",
    "Caller",
    "ClassicJoinRequest",
    "ConfigEntry",
    "ConfigList",
    "ConfigValue",
    "CreateTopicRequest",
    "DataPlane",
    "DeadLetterNotFound",
    "DeadLetterPage",
    "DeadLetterReplayed",
    "DeadLetterView",
    "DeliveredMessage",
    "Delivery",
    "GroupConfigRequest",
    "GroupDetail",
    "GroupError",
    "GroupRef",
    "GroupStats",
    "GroupSummary",
    "GroupView",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "IdempotencyKey",
    "JoinRequest",
    "JoinResponse",
    "KeyStats",
    "LagPoint",
    "LagSeries",
    "Message",
    "MessagePage",
    "MessageTooLarge",
    "NackItem",
    "NackOutcome",
    "NoSuchPartition",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "PartitionNotFound",
    "ProducerBatch",
    "PublishOutcomeUnknown",
    "PublishRequest",
    "PublishResult",
    "Published",
    "Pulled",
    "Push",
    "PushBody",
    "PushConfigRequest",
    "PushFailure",
    "PushOutcome",
    "PushSender",
    "PushSettings",
    "PushTarget",
    "PushTestResult",
    "Pusher",
    "QuotaExceeded",
    "ReadResult",
    "ReplayRequest",
    "Replayed",
    "RetryDelay",
    "Scope",
    "StoredMessage",
    "Stream",
    "ThrottleStats",
    "TopicDetail",
    "TopicExists",
    "TopicList",
    "TopicNotFound",
    "TopicRef",
    "TopicRoute",
    "TopicSummary",
    "TopicView",
    "TrafficSeries",
    "TrafficWindow",
    "UpdateTopicRequest",
    "Upkeep",
    "Window",
    "format_duration_ms",
    "group_view",
    "iso_timestamp",
    "message_id",
    "message_page",
    "push_body",
    "scheduling",
]
