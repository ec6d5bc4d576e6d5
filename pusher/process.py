"""The ``queuecore pusher`` process: finds the push groups every few seconds and runs a
:class:`~pusher.group.GroupPusher` for each, on one data plane, one HTTP client and one meter."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from contextlib import suppress

from billing.meter import MeterFlusher, UsageMeter
from core import settings
from core.db import AsyncPool, async_pool
from core.settings import PushSettings
from data_plane.service import DataPlane, PushSender, PushTarget
from observability import logging as qc_logging
from observability import telemetry
from observability.logging import get_logger
from observability.object_store import metered_store
from pusher.group import GroupPusher

log = get_logger("queuecore.pusher")
STOP_LIMIT_S = 20.0  # SIGTERM to leaving every group, within Kubernetes' 30 s grace


class Pusher:
    """Every push group of the deployment, delivered from this process while it runs; several
    processes share the groups' partitions as members of each group."""

    def __init__(self, plane: DataPlane, config: PushSettings, client_id: str) -> None:
        self.plane = plane
        self.config = config
        self.client_id = client_id
        self._groups: dict[str, tuple[GroupPusher, asyncio.Task[None]]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop`` is set, then let every group finish and leave."""
        sender = self.plane.push.sender(self.config.max_connections)
        try:
            while not stop.is_set():
                await self.refresh(sender)
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.config.refresh_ms / 1000)
        finally:
            await self.stop_all()
            await sender.aclose()

    async def refresh(self, sender: PushSender) -> None:
        """Start the groups that became push groups, update the others, stop those gone."""
        try:
            targets = {target.group_id: target for target in await self.plane.push.targets()}
        except Exception as exc:  # the database is away: the groups keep going as they are
            log.warning("pusher_refresh_failed", error=repr(exc))
            return
        for group_id, (group, task) in list(self._groups.items()):
            if task.done():
                del self._groups[group_id]  # it left (gone, or push off): started again if back
            elif group_id not in targets:
                group.stop()
            else:
                group.update(targets[group_id])
        for group_id, target in targets.items():
            if group_id not in self._groups:
                self._start(target, sender)

    def _start(self, target: PushTarget, sender: PushSender) -> None:
        group = GroupPusher(
            self.plane, target, sender, self.client_id, self.config.session_timeout_ms
        )
        task = asyncio.create_task(group.run(), name=f"push-{target.group_id}")
        self._groups[target.group_id] = (group, task)
        log.info("pusher_group_started", group_id=target.group_id, topic=target.topic)

    async def stop_all(self) -> None:
        """Stop every group and wait for them (each leaves its group), at most
        :data:`STOP_LIMIT_S`: a group still busy then is cancelled, and what it held comes back
        to the other pushers when its leases end."""
        log.info("pusher_stopping", groups=len(self._groups))
        for group, _ in self._groups.values():
            group.stop()
        self.plane.stop_waiting()  # pulls waiting for messages answer at once
        tasks = [task for _, task in self._groups.values()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=STOP_LIMIT_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._groups.clear()


def client_id() -> str:
    """How this pusher shows among a group's members: ``queuecore-pusher host pid``."""
    return f"queuecore-pusher {socket.gethostname()} {os.getpid()}"


async def serve(stop: asyncio.Event) -> None:
    """Build the data plane and the meter, push until ``stop``, then close them."""
    db: AsyncPool = async_pool(settings.database(), "pusher")
    await db.open(wait=False)
    meter = MeterFlusher(UsageMeter(), db.connection, settings.meter().flush_s)
    meter.start()
    plane = DataPlane(
        db,
        metered_store(settings.object_store()),
        settings.DataPlaneSettings.from_env(),
        meter.meter,
    )
    await plane.start()
    config = settings.push()
    if config.secrets_key is None:
        log.warning("push_secrets_unsealed", hint="set QUEUECORE_SECRETS_KEY (docs/push.md)")
    log.info("pusher_started", client_id=client_id())
    try:
        await Pusher(plane, config, client_id()).run(stop)
    finally:
        await plane.close()
        await meter.stop()  # its last flush: the deliveries pushed until now
        await db.close()
        log.info("pusher_stopped")


def run_pusher() -> int:
    """``queuecore pusher``: push until SIGTERM or SIGINT."""
    qc_logging.configure(settings.logs())
    telemetry.setup(settings.telemetry(), role="pusher")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await serve(stop)

    try:
        asyncio.run(main())
    finally:
        telemetry.shutdown()
    return 0
