"""The handler of each API, and the rate-limit category each counts in.

Produce counts as a publish request; fetches, offsets and group requests as consume requests;
topic creation and deletion as admin requests. ApiVersions, SASL, Metadata, FindCoordinator and
InitProducerId are part of connecting and are not counted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kafka_protocol import wire
from kafka_protocol.handlers import auth, cluster, fetch, groups, produce
from kafka_protocol.session import Session
from kafka_protocol.versions import Api
from tenants.tiers import Category

Handler = Callable[[Session, wire.RequestHead, Any], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {
    Api.API_VERSIONS: auth.api_versions,
    Api.SASL_HANDSHAKE: auth.sasl_handshake,
    Api.SASL_AUTHENTICATE: auth.sasl_authenticate,
    Api.METADATA: cluster.metadata,
    Api.FIND_COORDINATOR: cluster.find_coordinator,
    Api.CREATE_TOPICS: cluster.create_topics,
    Api.DELETE_TOPICS: cluster.delete_topics,
    Api.INIT_PRODUCER_ID: cluster.init_producer_id,
    Api.PRODUCE: produce.produce,
    Api.FETCH: fetch.fetch,
    Api.LIST_OFFSETS: fetch.list_offsets,
    Api.JOIN_GROUP: groups.join_group,
    Api.SYNC_GROUP: groups.sync_group,
    Api.HEARTBEAT: groups.heartbeat,
    Api.LEAVE_GROUP: groups.leave_group,
    Api.OFFSET_COMMIT: groups.offset_commit,
    Api.OFFSET_FETCH: groups.offset_fetch,
    Api.LIST_GROUPS: groups.list_groups,
    Api.DESCRIBE_GROUPS: groups.describe_groups,
}

CATEGORIES: dict[int, Category] = {
    Api.PRODUCE: "publish",
    Api.FETCH: "consume",
    Api.LIST_OFFSETS: "consume",
    Api.JOIN_GROUP: "consume",
    Api.SYNC_GROUP: "consume",
    Api.HEARTBEAT: "lease",  # as a REST heartbeat: keeping a member alive spends no data budget
    Api.LEAVE_GROUP: "consume",
    Api.OFFSET_COMMIT: "consume",
    Api.OFFSET_FETCH: "consume",
    Api.LIST_GROUPS: "consume",
    Api.DESCRIBE_GROUPS: "consume",
    Api.CREATE_TOPICS: "admin",
    Api.DELETE_TOPICS: "admin",
}
