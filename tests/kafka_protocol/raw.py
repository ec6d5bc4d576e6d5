"""A minimal Kafka client over a plain socket, for what the real clients cannot be made to do on
demand: send the same idempotent batch twice, read a response's throttle time, ask for an API
version the listener does not know."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import time
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from kafka_protocol import wire
from kafka_protocol.records import Record, encode_batch
from kafka_protocol.versions import Api


class RawClient:
    """One connection; requests are sent and answered one at a time."""

    def __init__(self, bootstrap: str, timeout_s: float = 30) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.correlation = 0

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()

    def send_only(self, frame: bytes) -> None:
        """Send a size-prefixed frame that gets no answer (a produce with ``acks=0``)."""
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def send_frame(self, frame: bytes) -> bytes:
        """Send a size-prefixed frame; the body of the answer (correlation id included)."""
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return data

    def frame(self, api_key: int, version: int, **fields: Any) -> bytes:
        """The bytes of one request built from ``fields`` (header included)."""
        self.correlation += 1
        cls = wire.request_type(api_key, version)
        header_cls = HeaderV2 if cls.__flexible__ else HeaderV1
        out = io.BytesIO()
        header = header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=self.correlation,
            client_id="raw-test",
        )
        entity_writer(header_cls)(out, header)
        entity_writer(cls)(out, wire.entity(cls, **fields))
        return out.getvalue()

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        """Send one request built from ``fields``; the decoded response."""
        answer = self.send_frame(self.frame(api_key, version, **fields))
        (correlation,) = struct.unpack_from(">i", answer)
        assert correlation == self.correlation
        response_cls = wire.response_type(api_key, version)
        offset = 4 + (1 if response_cls.__flexible__ and api_key != Api.API_VERSIONS else 0)
        response, _ = entity_reader(response_cls)(answer, offset)
        return response

    def login(self, key: str) -> Any:
        """SASL/PLAIN with ``key`` as the password; the SaslAuthenticate response."""
        self.request(Api.SASL_HANDSHAKE, 1, mechanism="PLAIN")
        token = b"\0queuecore\0" + key.encode()
        return self.request(Api.SASL_AUTHENTICATE, 2, auth_bytes=token)

    def produce(self, topic: str, partition: int, batch: bytes, version: int = 9) -> Any:
        """One ``acks=all`` Produce request of one partition's records; that partition's
        response."""
        response = self.request(Api.PRODUCE, version, **_produce(topic, partition, batch, -1))
        return response, response.responses[0].partition_responses[0]

    def produce_pipelined(
        self, topic: str, partition: int, batches: list[bytes], pause_s: float
    ) -> list[Any]:
        """The first batch, then after ``pause_s`` the others at once, each its own ``acks=all``
        Produce request on this connection without waiting for answers (as a producer with
        several requests in flight does); each partition response, in order."""
        frames = [
            self.frame(Api.PRODUCE, 9, **_produce(topic, partition, batch, -1)) for batch in batches
        ]
        sized = [struct.pack(">i", len(frame)) + frame for frame in frames]
        self.sock.sendall(sized[0])
        time.sleep(pause_s)
        self.sock.sendall(b"".join(sized[1:]))
        response_cls = wire.response_type(Api.PRODUCE, 9)
        offset = 4 + (1 if response_cls.__flexible__ else 0)
        answers = []
        for _ in frames:
            (size,) = struct.unpack(">i", self._read(4))
            response, _ = entity_reader(response_cls)(self._read(size), offset)
            answers.append(response.responses[0].partition_responses[0])
        return answers

    def produce_unacknowledged(self, topic: str, partition: int, batch: bytes) -> None:
        """One ``acks=0`` Produce request: nothing comes back."""
        self.send_only(self.frame(Api.PRODUCE, 9, **_produce(topic, partition, batch, 0)))


def _produce(topic: str, partition: int, batch: bytes, acks: int) -> dict[str, Any]:
    cls = wire.request_type(Api.PRODUCE, 9)
    data = wire.entity(wire.nested(cls, "PartitionProduceData"), index=partition, records=batch)
    topic_data = wire.entity(
        wire.nested(cls, "TopicProduceData"), name=topic, partition_data=(data,)
    )
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": datetime.timedelta(seconds=30),
        "topic_data": (topic_data,),
    }


def batch_of(values: list[bytes], producer_id: int = -1, base_sequence: int = -1) -> bytes:
    """A record batch of these values (timestamps now)."""
    now_ms = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
    records = [Record(None, value, (), now_ms) for value in values]
    return encode_batch(
        0, records, producer_id=producer_id, producer_epoch=0, base_sequence=base_sequence
    )
