"""The live console: one websocket stream per page kind, one publisher for everything.

``publish(event, payload)`` sends one typed event to every open dashboard
(the Channels group ``dashboard``, Redis layer). ``DashboardConsumer`` joins
that group on connect (a viewer at least), sends a first snapshot at once,
and forwards each event; the role is checked again per event, so a user whose
role was withdrawn stops receiving. Celery beat runs
``console.tasks.publish_dashboard`` every ``ASE_DASHBOARD_INTERVAL`` seconds;
operations publish a fresh snapshot as soon as they change something.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer

from console.roles import Role, has_role

log = logging.getLogger("ase.console.live")

DASHBOARD_GROUP = "dashboard"
EventType = Literal["snapshot"]


def publish(event: EventType, payload: dict[str, Any]) -> None:
    """Send one event to every open dashboard. Never raises: a console update must not fail an operation."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(DASHBOARD_GROUP, {"type": "dashboard.event", "event": event, "data": payload})
    except Exception as exc:  # noqa: BLE001 - Redis down: the page keeps its last state and says how old it is
        log.warning("dashboard update not published: %s: %s", type(exc).__name__, exc)


def publish_snapshot() -> None:
    from console.dashboard import snapshot

    publish("snapshot", snapshot())


class DashboardConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    async def connect(self) -> None:
        if not await self._allowed():
            await self.close(code=4403)
            return
        await self.channel_layer.group_add(DASHBOARD_GROUP, self.channel_name)
        await self.accept()
        from console.dashboard import snapshot

        await self.send_json({"event": "snapshot", "data": await database_sync_to_async(snapshot)()})

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(DASHBOARD_GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The stream is one-way; anything a client sends is ignored."""

    async def dashboard_event(self, message: dict[str, Any]) -> None:
        if not await self._allowed():
            await self.close(code=4403)
            return
        await self.send_json({"event": message["event"], "data": message["data"]})

    @database_sync_to_async
    def _allowed(self) -> bool:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return False
        user.refresh_from_db()
        return has_role(user, Role.VIEWER)
