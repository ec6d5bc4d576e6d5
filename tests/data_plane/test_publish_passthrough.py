"""A published message's JSON is stored as it came, without whitespace outside strings: escapes
and number spellings as sent, so consumers read the value the producer sent, and the tier's
message size counts the stored bytes. Repeated keys are refused as on every JSON endpoint."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from litestar.testing import TestClient

from tests.data_plane.test_consume_api import Group
from tests.data_plane.test_publish_api import Topic, make_topic, stored_messages
from tests.support.services import Services
from tests.support.tenancy import new_organisation

# data as a producer wrote it -> the bytes stored
SENT = {
    "spaced object": (
        b'{ "b" : [1, 2,\n {"c": null} ],\t"a": "x  y" }',
        b'{"b":[1,2,{"c":null}],"a":"x  y"}',
    ),
    "escaped string": (b'"caf\\u00e9 \\"\\/"', b'"caf\\u00e9 \\"\\/"'),
    "escaped key": (b'{"\\u00e9t\\u00e9" : "\\u00e9"}', b'{"\\u00e9t\\u00e9":"\\u00e9"}'),
    "float one": (b"1.0", b"1.0"),
    "big integer": (b"123456789012345678901234567890", b"123456789012345678901234567890"),
    "nested arrays": (b"[[1, [2, [3.5, -0.25e-3]]], [] ]", b"[[1,[2,[3.5,-0.25e-3]]],[]]"),
}


def topic_id(client: TestClient, group: Group) -> str:
    described = client.get(f"/v1/topics/{group.topic}", headers=group.headers)
    assert described.status_code == 200, described.text
    return str(described.json()["id"])


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_data_is_stored_as_sent_without_whitespace_and_read_back_as_the_same_value(
    client: TestClient, services: Services, unique: Callable[[str], str], batch: bool
) -> None:
    org = new_organisation(services.database_url, tier="pro")
    group = Group(client, org, unique)
    path = f"/v1/topics/{group.topic}/messages"
    sent = [data for data, _ in SENT.values()]
    if batch:  # every other message with a key, so both ways of reading an item are used
        items = [b'{"data": %s%s}' % (d, b', "key": "k"' * (i % 2)) for i, d in enumerate(sent)]
        response = client.post(
            f"{path}/batch",
            content=b'{"messages": [%s]}' % b", ".join(items),
            headers=_json(group.headers),
        )
        assert response.status_code == 201, response.text
    else:
        for data in sent:
            response = client.post(
                path,
                content=b'{"data" : %s }' % data,
                headers=_json(group.headers),
            )
            assert response.status_code == 201, response.text
    stored = stored_messages(services.database_url, topic_id(client, group))
    assert [s.message.value for s in stored] == [value for _, value in SENT.values()]
    expected = [json.loads(data) for data in sent]
    browsed = client.get(
        f"{path[: -len('/messages')]}/partitions/0/messages", headers=group.headers
    )
    assert browsed.status_code == 200, browsed.text
    assert [m["data"] for m in browsed.json()["messages"]] == expected
    pulled = group.pull(group.join())
    assert [m["data"] for m in pulled] == expected
    assert pulled[4]["data"] == 123456789012345678901234567890  # every digit, not a float


def test_the_size_limit_counts_the_stored_bytes_not_the_whitespace_sent(
    client: TestClient, services: Services, unique: Callable[[str], str]
) -> None:
    topic = make_topic(client, services, unique("spaced"), tier="developer")
    limit = 256 * 1024
    padding = b" " * 4096

    def data(length: int) -> bytes:  # stored as {"a":"x…x"}: 8 bytes around the text
        return b"{" + padding + b'"a" :' + padding + b'"' + b"x" * (length - 8) + b'"' + b"}"

    for batch in (False, True):
        at_limit, over = (b'{"data": %s}' % data(n) for n in (limit, limit + 1))
        path = topic.path + ("/batch" if batch else "")
        if batch:
            at_limit, over = (b'{"messages": [%s]}' % body for body in (at_limit, over))
        fits = client.post(path, content=at_limit, headers=_json(topic.headers))
        assert fits.status_code == 201, fits.text
        refused = client.post(path, content=over, headers=_json(topic.headers))
        assert refused.status_code == 413, refused.text
        assert refused.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    stored = stored_messages(services.database_url, topic.id)
    assert [len(s.message.value) for s in stored] == [limit, limit]
    assert stored[0].message.value == b'{"a":"' + b"x" * (limit - 8) + b'"}'


REPEATED = {
    "in data": (b'{"data": {"a": 1, "b": {"a": 2}, "a": 3}}', "a", False),
    "in data's array": (b'{"data": [1, {"n": 1, "n": 2}], "key": "k"}', "n", False),
    "in the envelope": (b'{"data": "x", "data": "y"}', "data", False),
    "in a batch item": (
        b'{"messages": [{"data": 1}, {"data": 2, "key": "a", "key": "b"}]}',
        "key",
        True,
    ),
    "in a batch's data": (b'{"messages": [{"data": {"z": [{"q": 1, "q": 1}]}}]}', "q", True),
    "in the batch": (b'{"messages": [{"data": 1}], "messages": [{"data": 2}]}', "messages", True),
}


@pytest.mark.parametrize(("body", "key", "batch"), REPEATED.values(), ids=REPEATED.keys())
def test_a_key_twice_anywhere_is_refused_and_nothing_is_stored(
    client: TestClient, services: Services, topic: Topic, body: bytes, key: str, batch: bool
) -> None:
    response = client.post(
        topic.path + ("/batch" if batch else ""), content=body, headers=_json(topic.headers)
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["status"]) == ("VALIDATION_ERROR", 400)
    assert error["message"] == f"Request body has the key {key!r} twice"
    assert stored_messages(services.database_url, topic.id) == []


@pytest.fixture
def topic(client: TestClient, services: Services, unique: Callable[[str], str]) -> Topic:
    return make_topic(client, services, unique("repeat"))


def _json(headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "Content-Type": "application/json"}
