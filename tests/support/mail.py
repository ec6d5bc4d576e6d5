"""The mail sink for tests (the one ``queuecore dev`` runs), and an in-process app that sends
its email there."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from litestar.testing import TestClient

from core import settings
from infra.embedded import free_port_block
from infra.mailsink import MailSink, ReceivedMail


@contextmanager
def running_sink() -> Iterator[MailSink]:
    """A mail sink on a free port."""
    sink = MailSink(free_port_block())
    sink.start()
    try:
        yield sink
    finally:
        sink.stop()


@contextmanager
def app_with(env: dict[str, str]) -> Iterator[TestClient]:
    """The API application in this process with ``env`` added to its settings."""
    from control_plane.app import create_app

    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    settings.clear_caches()
    try:
        with TestClient(app=create_app(), raise_server_exceptions=False) as client:
            yield client
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        settings.clear_caches()


def link_path(mail: ReceivedMail, kind: str) -> str:
    """The path of the ``/dashboard/{kind}/…`` link in a message (``invites`` or ``reset``)."""
    [link] = [link for link in mail.links if f"/dashboard/{kind}/" in link]
    path = urlsplit(link).path
    assert re.fullmatch(rf"/dashboard/{kind}/qc_(inv|rst)_[A-Za-z0-9_-]{{43}}", path), path
    return path
