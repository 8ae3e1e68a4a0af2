"""Issue 7 in the console and ``/api/component/status/``: each protected unit's circuit breaker (state,
consecutive failures, transitions, since) and the ordered groups that wait, with the message each waits for.

The state is the real one, in Redis, made the way workers make it (``Protection.record``,
``OrderedGroups.block``); the pages read it through ``console.protection``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
import redis

from ase_engine.ordering import OrderedGroups
from ase_engine.protection import Protection
from tests.conftest import TEST_REDIS_URL

pytestmark = pytest.mark.broker


@pytest.fixture
def protected(broker, deploy, redis_available, service_name):
    """A unit with a breaker opened by two failures and an ordered group blocked by its head message."""
    unit = deploy(
        service_name,
        "http://127.0.0.1:9/never",
        mustBeAutomaticallyStarted="false",
        **{"circuit-breaker-threshold": "2", "circuit-breaker-cooldown": "60", "ordered-groups": "true"},
    ).unit.to_config()
    deploy(f"{service_name}plain", "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    client = redis.Redis.from_url(TEST_REDIS_URL)
    shared, groups = Protection(client, "w1"), OrderedGroups(client)
    shared.record(unit, failed=True)
    shared.record(unit, failed=True)
    groups.block(unit, "customer-42", "msg-head-0001", "retry 1 of 3 scheduled")
    try:
        yield service_name
    finally:
        shared.reset(service_name)
        groups.release(service_name, "customer-42")


def test_status_shows_an_open_breaker_and_the_blocked_group_with_the_message_it_waits_for(api, protected):
    started = datetime.now(UTC)

    response = api("viewer").get("/api/component/status/")

    assert response.status_code == 200
    protection = response.json()["protection"]
    assert protection["error"] == ""
    (breaker,) = protection["breakers"]  # the unit without a breaker is not listed
    assert (breaker["service"], breaker["state"], breaker["consecutive_failures"]) == (protected, "open", 2)
    assert (breaker["opens"], breaker["closes"], breaker["threshold"], breaker["cooldown"]) == (1, 0, 2, 60)
    assert abs((datetime.fromisoformat(breaker["since"]) - started).total_seconds()) < 5
    assert breaker["half_open_after_ms"] - breaker["opened_at_ms"] == 60_000
    (group,) = protection["blocked_groups"]
    assert (group["service"], group["group"], group["blocked_by"], group["phase"]) == (
        protected,
        "customer-42",
        "msg-head-0001",
        "blocked",
    )
    assert group["reason"] == "retry 1 of 3 scheduled" and group["since"]


def test_status_with_closed_breakers_and_no_blocked_group(api, deploy, broker, redis_available, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false",
           **{"circuit-breaker-threshold": "3"})  # fmt: skip

    protection = api("viewer").get("/api/component/status/").json()["protection"]

    (breaker,) = protection["breakers"]
    assert (breaker["state"], breaker["consecutive_failures"], breaker["since"]) == ("closed", 0, None)
    assert protection["blocked_groups"] == []


def test_the_dashboard_carries_each_units_breaker_and_the_blocked_groups_with_a_link_template(client_as, protected):
    page = client_as("viewer").get("/").content.decode()

    snapshot = json.loads(page.split('<script id="snapshot" type="application/json">')[1].split("</script>")[0])
    units = {u["service"]: u for u in snapshot["units"]}
    assert units[protected]["breaker"]["state"] == "open"
    assert units[protected]["breaker"]["consecutive_failures"] == 2
    assert units[f"{protected}plain"]["breaker"] is None
    assert [(g["group"], g["blocked_by"]) for g in snapshot["blocked_groups"]] == [("customer-42", "msg-head-0001")]
    assert snapshot["protection_error"] == ""
    assert "Circuit breaker</th>" in page and 'id="groups-body"' in page
    assert 'data-message-url="/messages/MESSAGE/"' in page


def test_the_live_dashboard_stream_pushes_the_breaker_state(client_as, protected, redis_available):
    from channels.layers import channel_layers
    from channels.testing import WebsocketCommunicator

    from console.asgi import application

    cookie = client_as("viewer").cookies["sessionid"].value
    channel_layers.backends.clear()

    async def scenario() -> dict:
        communicator = WebsocketCommunicator(
            application,
            "/ws/dashboard/",
            headers=[(b"origin", b"http://testserver"), (b"cookie", f"sessionid={cookie}".encode())],
        )
        connected, _ = await communicator.connect()
        assert connected
        first = await communicator.receive_json_from(timeout=10)
        await communicator.disconnect()
        return first

    try:
        first = asyncio.run(scenario())
    finally:
        channel_layers.backends.clear()
    unit = next(u for u in first["data"]["units"] if u["service"] == protected)
    assert unit["breaker"]["state"] == "open"
    assert first["data"]["blocked_groups"][0]["blocked_by"] == "msg-head-0001"


def test_with_redis_unreachable_the_status_says_why_instead_of_failing(api, deploy, broker, service_name, settings):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false",
           **{"circuit-breaker-threshold": "3"})  # fmt: skip
    from tests.conftest import free_port

    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"

    response = api("viewer").get("/api/component/status/")

    assert response.status_code == 200
    protection = response.json()["protection"]
    assert protection["breakers"] == [] and protection["blocked_groups"] == []
    assert protection["error"].startswith("shared state unavailable (Redis): ")
