"""Duplicate elimination at the ingress (``Idempotency-Key``, console.dedup) against the real
ActiveMQ, Redis and database: concurrent duplicates, web restarts, several web processes."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ase_engine.errors import PersistenceError
from ase_engine.message import Message
from console import dedup
from tests.conftest import free_port, wait_until
from tests.fixtures.services import ROOT

pytestmark = pytest.mark.broker

BODY = b'{"order": 42}'


class WebServer:
    """The web tier as scripts/up.sh runs it (uvicorn ``console.asgi:application``), on a free port."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "console.asgi:application", "--host", "127.0.0.1"]
            + ["--port", str(self.port), "--log-level", "warning"],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"web server exited:\n{log_path.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"web server not listening in 30 s:\n{log_path.read_text()[-3000:]}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


@pytest.fixture
def web(worker_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[[], WebServer]]:
    started: list[WebServer] = []

    def _start() -> WebServer:
        server = WebServer(worker_env, tmp_path / f"web-{len(started)}.log")
        started.append(server)
        return server

    yield _start
    for server in started:
        server.stop()


def post_many(urls: list[str], service: str, count: int, body: bytes = BODY, key: str = "k-1") -> list[httpx.Response]:
    """``count`` posts at once, spread over ``urls`` (one HTTP connection each)."""

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=count)) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"{urls[n % len(urls)]}/ase/{service}/",
                        content=body,
                        headers={"Content-Type": "application/json", "Idempotency-Key": key},
                    )
                    for n in range(count)
                )
            )

    return asyncio.run(run())


def concurrent_in_process(service: str, count: int, key: str) -> list[httpx.Response]:
    """``count`` posts at once into the ASGI application of this process (one event loop)."""
    from console.asgi import application

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"/ase/{service}/",
                        content=BODY,
                        headers={"Content-Type": "application/json", "Idempotency-Key": key},
                    )
                    for _ in range(count)
                )
            )

    return asyncio.run(run())


def test_fifty_concurrent_posts_of_one_key_persist_one_message_delivered_once(
    broker, deploy, target, sending, service_name
):
    result = deploy(service_name, target.on("/ok", 200, b"{}", "application/json"), mustBeAutomaticallyStarted="false")

    responses = concurrent_in_process(service_name, 50, "order-42")

    assert [r.status_code for r in responses] == [202] * 50
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    assert sum(r.headers.get("idempotent-replayed") == "true" for r in responses) == 49
    assert broker.depth(service_name) == 1
    sending(result.unit.to_config())
    wait_until(lambda: len(target.received) >= 1, 15, what="the delivery")
    wait_until(lambda: broker.depth(service_name) == 0, 10, what="the ack")
    time.sleep(1)
    assert [r.headers["X-ASE-Message-Id"] for r in target.received] == list(ids)
    assert target.received[0].headers["Idempotency-Key"] == "order-42"


def test_two_web_processes_persist_one_message_for_fifty_concurrent_duplicates(broker, deploy, web, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    first, second = web(), web()

    responses = post_many([first.url, second.url], service_name, 50, key="across-processes")

    assert [r.status_code for r in responses] == [202] * 50, [r.text for r in responses if r.status_code != 202]
    assert len({r.json()["id"] for r in responses}) == 1
    ((headers, body),) = broker.drain(service_name, expect=1, timeout=3)
    assert Message.from_frame(headers, body).id == responses[0].json()["id"]


def test_a_repeat_after_a_web_restart_gets_the_first_answer(broker, deploy, web, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    before = web()
    (first,) = post_many([before.url], service_name, 1, key="survives-restarts")
    before.stop()

    after = web()
    (repeat,) = post_many([after.url], service_name, 1, key="survives-restarts")

    assert first.status_code == repeat.status_code == 202
    assert repeat.json() == first.json()
    assert repeat.headers["idempotent-replayed"] == "true"
    assert broker.depth(service_name) == 1


def test_the_same_key_with_a_different_body_is_409_with_e1001(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    assert ingress.post(service_name, BODY, **{"Idempotency-Key": "reused"}).status_code == 202

    response = ingress.post(service_name, b'{"order": 43}', **{"Idempotency-Key": "reused"})

    assert response.status_code == 409
    assert response.json()["error"] == (
        f"ERROR SE-ASE-E1001: The Idempotency-Key 'reused' was already used for the service '{service_name}' "
        "with a different request (body, content type, MEP or properties). Use a new key for a new request."
    )
    assert broker.depth(service_name) == 1


def test_different_properties_under_one_key_are_a_different_request(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    headers = {"Idempotency-Key": "props", "X-ASE-Property-customer": "1"}
    assert ingress.post(service_name, BODY, **headers).status_code == 202

    response = ingress.post(service_name, BODY, **{**headers, "X-ASE-Property-customer": "2"})

    assert response.status_code == 409
    assert broker.depth(service_name) == 1


def test_one_key_in_two_services_is_two_requests(ingress, broker, deploy, service_name):
    other = f"{service_name}b"
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    deploy(other, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")

    one = ingress.post(service_name, BODY, **{"Idempotency-Key": "shared"})
    two = ingress.post(other, BODY, **{"Idempotency-Key": "shared"})

    assert one.status_code == two.status_code == 202
    assert one.json()["id"] != two.json()["id"]
    assert broker.depth(service_name) == broker.depth(other) == 1


def test_requests_without_a_key_are_never_deduplicated(ingress, broker, deploy, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")

    ids = {ingress.post(service_name, BODY).json()["id"] for _ in range(3)}

    assert len(ids) == 3
    assert broker.depth(service_name) == 3


def test_a_key_whose_first_persist_failed_is_released_for_the_retry(broker, deploy, redis_available, service_name):
    result = deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    unit = result.unit.to_config()
    from ase_engine.posting import build_message
    from console.ingress import poster

    def message() -> Message:
        return build_message(unit, BODY, content_type="application/json", mep=None, idempotency_key="flaky")

    async def broker_refuses() -> None:
        raise PersistenceError("SE-ASE-E0011", area=unit.areas.pending, reason="no receipt")

    async def scenario() -> tuple[Any, Any]:
        with pytest.raises(PersistenceError):
            await dedup.once(unit, message(), broker_refuses)
        retried = message()
        the_poster = await poster()
        accepted = await dedup.once(unit, retried, lambda: the_poster.post(unit, retried))
        return retried.id, accepted

    retried_id, (answer, replayed) = asyncio.run(scenario())

    assert (answer["id"], replayed) == (retried_id, False)
    assert broker.depth(service_name) == 1


def test_a_duplicate_that_waits_too_long_for_the_first_is_409_with_e1002(broker, deploy, settings, service_name):
    result = deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    unit = result.unit.to_config()
    settings.ASE_IDEMPOTENCY_WAIT = 0.3
    from ase_engine.posting import build_message
    from console.ingress import poster

    def message() -> Message:
        return build_message(unit, BODY, content_type="application/json", mep=None, idempotency_key="slow")

    first = message()

    async def slow_persist() -> None:
        await asyncio.sleep(1.0)  # a broker slow to confirm
        await (await poster()).post(unit, first)

    async def scenario() -> tuple[Any, BaseException | None]:
        first_call = asyncio.ensure_future(dedup.once(unit, first, slow_persist))
        await asyncio.sleep(0.05)
        refused = None
        try:
            await dedup.once(unit, message(), slow_persist)
        except dedup.DuplicateRejected as exc:
            refused = exc
        return await first_call, refused

    (answer, replayed), refused = asyncio.run(scenario())

    assert (answer["id"], replayed) == (first.id, False)
    assert refused is not None and refused.status == 409
    assert refused.public == (
        f"ERROR SE-ASE-E1002: A request with the Idempotency-Key 'slow' for the service '{service_name}' "
        "is still being persisted after 0.3 seconds. Retry later."
    )
    assert broker.depth(service_name) == 1


def test_a_key_is_remembered_for_the_longer_of_the_ttl_and_the_retention(
    ingress, broker, deploy, settings, service_name
):
    import redis

    settings.ASE_IDEMPOTENCY_RETENTION = 100
    short, long = service_name, f"{service_name}b"
    deploy(short, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false", **{"time-to-live": "10"})
    deploy(long, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false", **{"time-to-live": "5000"})

    for service in (short, long):
        assert ingress.post(service, BODY, **{"Idempotency-Key": "ttl"}).status_code == 202

    client = redis.Redis.from_url(settings.REDIS_URL)
    assert 90_000 < client.pttl(dedup.redis_key(short, "ttl")) <= 100_000
    assert 4_900_000 < client.pttl(dedup.redis_key(long, "ttl")) <= 5_000_000


def test_unreachable_redis_refuses_a_keyed_request_with_503_e1003(ingress, broker, deploy, settings, service_name):
    deploy(service_name, "http://127.0.0.1:9/never", mustBeAutomaticallyStarted="false")
    settings.ASE_IDEMPOTENCY_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"

    response = ingress.post(service_name, BODY, **{"Idempotency-Key": "no-redis"})

    assert response.status_code == 503
    assert response.json()["error"].startswith("ERROR SE-ASE-E1003: The duplicate check of the Idempotency-Key")
    assert broker.depth(service_name) == 0
    assert ingress.post(service_name, BODY).status_code == 202
