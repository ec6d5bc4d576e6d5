"""One spelling in the API: a message's id is ``messageId`` in every shape the SDKs read."""

from __future__ import annotations

from litestar.testing import TestClient

MESSAGE_SHAPES = (
    "PublishResult",
    "BatchItemResult",
    "DeliveredMessage",
    "MessageView",
    "DeadLetterView",
)


def test_every_message_shape_of_the_openapi_document_says_message_id(client: TestClient) -> None:
    schemas = client.get("/schema/openapi.json").json()["components"]["schemas"]
    for name in MESSAGE_SHAPES:
        properties = schemas[name]["properties"]
        assert "messageId" in properties and "id" not in properties, name
