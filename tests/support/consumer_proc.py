"""A consumer process for end-to-end tests: joins a group, pulls, acks, records what happened.

``python -m tests.support.consumer_proc BASE_URL KEY TOPIC GROUP HISTORY_FILE``. The history
file has an ``acking <partition> <offset>`` line for each message of an ack request, written
before it is sent, and an ``acked <partition> <offset>`` line for every ack the server accepted,
written after the answer came: a killed process never records an ack it did not get, and the
messages of an ack request whose answer it never read are the ``acking`` lines without ``acked``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx


class RetryingClient(httpx.Client):
    """Retries 429 and 503 after ``Retry-After``, as a client library does."""

    def request(self, *args: Any, **kwargs: Any) -> httpx.Response:  # type: ignore[override]
        while True:
            response = super().request(*args, **kwargs)
            if response.status_code not in (429, 503):
                return response
            time.sleep(float(response.headers.get("retry-after", "1")))


def main(base: str, key: str, topic: str, group: str, history_path: str) -> None:
    """Consume until killed."""
    client = RetryingClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    prefix = f"/v1/topics/{topic}/groups/{group}"
    member = client.post(f"{prefix}/members", json={"clientId": "e2e"}).json()
    last_beat = time.monotonic()
    with open(history_path, "a", buffering=1) as history:
        while True:
            if time.monotonic() - last_beat > member["heartbeatIntervalMs"] / 1000:
                beat = client.post(f"{prefix}/members/{member['memberId']}/heartbeat")
                if beat.status_code == 404:
                    member = client.post(f"{prefix}/members", json={"clientId": "e2e"}).json()
                elif beat.json()["shouldRejoin"]:
                    member = client.post(
                        f"{prefix}/members", json={"memberId": member["memberId"]}
                    ).json()
                last_beat = time.monotonic()
            pulled = client.post(
                f"{prefix}/members/{member['memberId']}/pull",
                json={"maxMessages": 20, "waitMs": 500},
            )
            if pulled.status_code != 200:
                continue
            messages = pulled.json()["messages"]
            if not messages:
                continue
            by_ack = {m["ackId"]: m for m in messages}
            history.writelines(f"acking {m['partition']} {m['offset']}\n" for m in messages)
            response = client.post(f"{prefix}/ack", json={"ackIds": list(by_ack)})
            if response.status_code == 200:
                for ack_id in response.json()["acked"]:
                    history.write(
                        f"acked {by_ack[ack_id]['partition']} {by_ack[ack_id]['offset']}\n"
                    )


if __name__ == "__main__":
    main(*sys.argv[1:6])
