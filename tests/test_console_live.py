"""The live dashboard stream: Channels' WebsocketCommunicator against the real ASGI application
(console.asgi: session auth, origin check), the real Redis channel layer and the real broker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from console.live import publish, publish_snapshot

pytestmark = pytest.mark.broker

ORIGIN = (b"origin", b"http://testserver")


@pytest.fixture
def channel_layer(redis_available: None) -> Iterator[None]:
    """The Redis layer of the settings (on the test run's Redis database), fresh for each test's event loop."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def _communicator(cookie: str | None, origin: tuple[bytes, bytes] = ORIGIN) -> WebsocketCommunicator:
    from console.asgi import application

    headers = [origin]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)


def _session(client_as: Any, role: str) -> str:
    return client_as(role).cookies["sessionid"].value


def test_anonymous_client_is_refused(channel_layer, transactional_db):
    async def scenario() -> tuple[bool, Any]:
        communicator = _communicator(None)
        connected, code = await communicator.connect()
        await communicator.disconnect()
        return connected, code

    connected, code = asyncio.run(scenario())
    assert not connected
    assert code == 4403


def test_a_foreign_origin_is_refused(channel_layer, client_as):
    cookie = _session(client_as, "viewer")

    async def scenario() -> bool:
        communicator = _communicator(cookie, origin=(b"origin", b"http://evil.example"))
        connected, _ = await communicator.connect()
        await communicator.disconnect()
        return connected

    assert not asyncio.run(scenario())


def test_viewer_gets_a_snapshot_on_connect_then_every_published_one(channel_layer, client_as, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/x")
    cookie = _session(client_as, "viewer")

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        communicator = _communicator(cookie)
        connected, _ = await communicator.connect()
        assert connected
        first = await communicator.receive_json_from(timeout=10)
        # Published by another process in real life (beat task, an operation): here, from a thread.
        from console.models import ServiceUnit

        await asyncio.to_thread(ServiceUnit.objects.filter(service=service_name).update, posting_started=False)
        await asyncio.to_thread(publish_snapshot)
        second = await communicator.receive_json_from(timeout=10)
        await communicator.disconnect()
        return first, second

    first, second = asyncio.run(scenario())
    assert first["event"] == second["event"] == "snapshot"
    before = next(u for u in first["data"]["units"] if u["service"] == service_name)
    after = next(u for u in second["data"]["units"] if u["service"] == service_name)
    assert (before["posting_started"], after["posting_started"]) == (True, False)
    assert after["areas"]["PENDING"] == 0
    assert second["data"]["broker"]["status"] == "connected"


def test_a_user_whose_role_is_withdrawn_stops_receiving(channel_layer, client_as):
    from django.contrib.auth.models import User

    cookie = _session(client_as, "viewer")

    async def scenario() -> Any:
        communicator = _communicator(cookie)
        connected, _ = await communicator.connect()
        assert connected
        await communicator.receive_json_from(timeout=10)
        user = await asyncio.to_thread(User.objects.get, username="viewer-user")
        await asyncio.to_thread(user.groups.clear)
        await asyncio.to_thread(publish, "snapshot", {"units": []})
        output = await communicator.receive_output(timeout=10)
        await communicator.wait()
        return output

    output = asyncio.run(scenario())
    assert output == {"type": "websocket.close", "code": 4403}
