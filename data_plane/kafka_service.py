"""What the Kafka protocol listener (``kafka_protocol``) may use of the data plane: the process's
:class:`DataPlane` and the types its Kafka-facing calls take, return and raise. The listener
imports the data plane through this module only, so its calls are one surface."""

from data_plane.errors import (
    MessageTooLarge,
    PublishOutcomeUnknown,
    QuotaExceeded,
    TopicExists,
    TopicNotFound,
)
from data_plane.groups.classic import GroupError
from data_plane.groups.classic import JoinRequest as ClassicJoinRequest
from data_plane.read.reader import OffsetOutOfRange, PartitionNotFound
from data_plane.runtime import DataPlane
from data_plane.topics.service import Topic
from data_plane.write.publish import TopicRoute
from data_plane.write.records import Appended, OutOfOrderSequence, ProducerBatch
from data_plane.write.records import PartitionNotFound as NoSuchPartition
from data_plane.write.segment import BYTES, JSON, NULL, Message

__all__ = [
    "BYTES",
    "JSON",
    "NULL",
    "Appended",
    "ClassicJoinRequest",
    "DataPlane",
    "GroupError",
    "Message",
    "MessageTooLarge",
    "NoSuchPartition",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "PartitionNotFound",
    "ProducerBatch",
    "PublishOutcomeUnknown",
    "QuotaExceeded",
    "Topic",
    "TopicExists",
    "TopicNotFound",
    "TopicRoute",
]
