"""Classic consumer groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, ListGroups and DescribeGroups, translated to the data plane's group coordinator
(``data_plane.groups.classic``), whose state is in PostgreSQL. Every request needs the key's
``consume`` scope; groups are named within the key's environment."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from data_plane.service import ClassicJoinRequest, GroupError
from kafka_protocol import wire
from kafka_protocol.errors import code_of
from kafka_protocol.handlers.cluster import has_scope
from kafka_protocol.session import Session
from kafka_protocol.versions import Api

_DENIED = ErrorCode.group_authorization_failed


def _env(session: Session) -> str:
    assert session.auth is not None
    return session.auth.environment_id


def _code(error: GroupError) -> ErrorCode:
    return ErrorCode[error.code.lower()]


async def join_group(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Join and wait for the generation; the leader gets every member's metadata."""
    cls = wire.response_type(Api.JOIN_GROUP, head.api_version)

    def answer(code: ErrorCode, **values: Any) -> Any:
        defaults = {"generation_id": -1, "protocol_name": None, "leader": "", "members": ()}
        defaults.setdefault("member_id", body.member_id)
        return wire.entity(cls, throttle_time=0, error_code=code, **(defaults | values))

    if not has_scope(session, "consume"):
        return answer(_DENIED)
    session_ms = wire.millis(body.session_timeout)
    rebalance = getattr(body, "rebalance_timeout", None)
    request = ClassicJoinRequest(
        group=body.group_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=head.client_id,
        client_host=session.client_host,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms if rebalance is None else wire.millis(rebalance),
        protocol_type=body.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
    )
    try:
        joined = await session.services.data_plane.classic_groups.join(_env(session), request)
    except GroupError as error:
        return answer(_code(error))
    member_cls = wire.nested(cls, "JoinGroupResponseMember")
    members = tuple(
        wire.entity(
            member_cls,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            metadata=m.metadata,
        )
        for m in joined.members
    )
    return answer(
        ErrorCode.none,
        generation_id=joined.generation,
        protocol_type=joined.protocol_type,
        protocol_name=joined.protocol_name,
        leader=joined.leader_id,
        member_id=joined.member_id,
        members=members,
    )


async def sync_group(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """The member's assignment once the leader sent everyone's."""
    cls = wire.response_type(Api.SYNC_GROUP, head.api_version)
    if not has_scope(session, "consume"):
        return wire.entity(cls, throttle_time=0, error_code=_DENIED, assignment=b"")
    assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
    try:
        assignment = await session.services.data_plane.classic_groups.sync(
            _env(session), body.group_id, body.member_id, body.generation_id, assignments
        )
    except GroupError as error:
        return wire.entity(cls, throttle_time=0, error_code=_code(error), assignment=b"")
    return wire.entity(
        cls,
        throttle_time=0,
        error_code=ErrorCode.none,
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignment=assignment,
    )


async def heartbeat(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Keep the member; REBALANCE_IN_PROGRESS tells it to rejoin."""
    cls = wire.response_type(Api.HEARTBEAT, head.api_version)
    code = ErrorCode.none
    if not has_scope(session, "consume"):
        code = _DENIED
    else:
        try:
            await session.services.data_plane.classic_groups.heartbeat(
                _env(session), body.group_id, body.member_id, body.generation_id
            )
        except GroupError as error:
            code = _code(error)
    return wire.entity(cls, throttle_time=0, error_code=code)


async def leave_group(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Members leave; the others rebalance at once."""
    cls = wire.response_type(Api.LEAVE_GROUP, head.api_version)
    members = getattr(body, "members", None)
    ids = [m.member_id for m in members] if members is not None else [body.member_id]
    if not has_scope(session, "consume"):
        return wire.entity(cls, throttle_time=0, error_code=_DENIED, members=())
    unknown = await session.services.data_plane.classic_groups.leave(
        _env(session), body.group_id, ids
    )
    code = ErrorCode.unknown_member_id if members is None and unknown else ErrorCode.none
    listed = ()
    if members is not None:
        member_cls = wire.nested(cls, "MemberResponse")
        listed = tuple(
            wire.entity(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=ErrorCode.unknown_member_id
                if m.member_id in unknown
                else ErrorCode.none,
            )
            for m in members
        )
    return wire.entity(cls, throttle_time=0, error_code=code, members=listed)


async def offset_commit(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """Commit offsets as Kafka does (per partition), where the REST API lists them with lag."""
    cls = wire.response_type(Api.OFFSET_COMMIT, head.api_version)
    generation = getattr(body, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = body.generation_id
    code = await _commit_check(session, body.group_id, body.member_id, generation)
    topic_cls = wire.nested(cls, "OffsetCommitResponseTopic")
    partition_cls = wire.nested(cls, "OffsetCommitResponsePartition")
    topics = []
    for topic in body.topics:
        codes = await _commit_topic(session, body.group_id, topic) if code is None else None
        topics.append(
            wire.entity(
                topic_cls,
                name=topic.name,
                partitions=tuple(
                    wire.entity(
                        partition_cls,
                        partition_index=p.partition_index,
                        error_code=code if codes is None else codes,
                    )
                    for p in topic.partitions
                ),
            )
        )
    return wire.entity(cls, throttle_time=0, topics=tuple(topics))


async def _commit_check(
    session: Session, group: str, member_id: str, generation: int
) -> ErrorCode | None:
    if not has_scope(session, "consume"):
        return _DENIED
    try:
        await session.services.data_plane.classic_groups.check_commit(
            _env(session), group, member_id, generation
        )
    except GroupError as error:
        return _code(error)
    return None


async def _commit_topic(session: Session, group: str, topic: Any) -> ErrorCode:
    auth = session.auth
    assert auth is not None
    data_plane = session.services.data_plane
    try:
        route = await data_plane.records.route(auth, topic.name)
        offsets = [
            (p.partition_index, p.committed_offset, p.committed_metadata or "")
            for p in topic.partitions
        ]
        if any(not 0 <= p < route.partitions for p, _, _ in offsets):
            return ErrorCode.unknown_topic_or_partition
        await data_plane.classic_groups.commit_offsets(
            auth.environment_id, group, route.target.id, offsets
        )
    except GroupError as error:
        return _code(error)
    except Exception as exc:
        return code_of(exc)
    return ErrorCode.none


async def offset_fetch(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """The group's committed offsets (-1 where it committed none)."""
    cls = wire.response_type(Api.OFFSET_FETCH, head.api_version)
    topic_cls = wire.nested(cls, "OffsetFetchResponseTopic")
    partition_cls = wire.nested(cls, "OffsetFetchResponsePartition")
    if not has_scope(session, "consume"):
        return wire.entity(cls, throttle_time=0, topics=(), error_code=_DENIED)
    committed = await session.services.data_plane.classic_groups.committed(
        _env(session), body.group_id
    )
    known = {(c.topic, c.partition): c for c in committed}
    wanted: dict[str, list[int]] = {}
    if body.topics is None:
        for c in committed:
            wanted.setdefault(c.topic, []).append(c.partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in body.topics}
    topics = []
    for name, partitions in wanted.items():
        answers = []
        for partition in partitions:
            found = known.get((name, partition))
            answers.append(
                wire.entity(
                    partition_cls,
                    partition_index=partition,
                    committed_offset=found.offset if found else -1,
                    committed_leader_epoch=-1,
                    metadata=found.metadata if found else "",
                    error_code=ErrorCode.none,
                )
            )
        topics.append(wire.entity(topic_cls, name=name, partitions=tuple(answers)))
    return wire.entity(cls, throttle_time=0, topics=tuple(topics), error_code=ErrorCode.none)


async def list_groups(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """The Kafka groups of the key's environment."""
    cls = wire.response_type(Api.LIST_GROUPS, head.api_version)
    if not has_scope(session, "consume"):
        return wire.entity(cls, throttle_time=0, error_code=_DENIED, groups=())
    wanted = set(getattr(body, "states_filter", ()) or ())
    listed_cls = wire.nested(cls, "ListedGroup")
    groups = tuple(
        wire.entity(listed_cls, group_id=name, protocol_type=kind, group_state=state)
        for name, kind, state in await session.services.data_plane.classic_groups.list_groups(
            _env(session)
        )
        if not wanted or state in wanted
    )
    return wire.entity(cls, throttle_time=0, error_code=ErrorCode.none, groups=groups)


async def describe_groups(session: Session, head: wire.RequestHead, body: Any) -> Any:
    """State, protocol and members of each group (Dead when unknown)."""
    cls = wire.response_type(Api.DESCRIBE_GROUPS, head.api_version)
    group_cls = wire.nested(cls, "DescribedGroup")
    member_cls = wire.nested(cls, "DescribedGroupMember")
    groups = []
    for name in body.groups:
        if not has_scope(session, "consume"):
            groups.append(
                wire.entity(
                    group_cls,
                    error_code=_DENIED,
                    group_id=name,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=-2147483648,
                )
            )
            continue
        view = await session.services.data_plane.classic_groups.describe(_env(session), name)
        members = tuple(
            wire.entity(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in view.members
        )
        groups.append(
            wire.entity(
                group_cls,
                error_code=ErrorCode.none,
                group_id=name,
                group_state=view.state,
                protocol_type=view.protocol_type,
                protocol_data=view.protocol_name,
                members=members,
                authorized_operations=-2147483648,
            )
        )
    return wire.entity(cls, throttle_time=0, groups=tuple(groups))
