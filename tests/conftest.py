"""Fixtures for tests against real services.

The test run starts its own ActiveMQ (scripts/activemq.sh, port 61623, data
under var/test-activemq, wiped at the start of the run); Redis and the
database are the machine's (DATABASE_URL: PostgreSQL in CI). A fixture that
cannot reach a service it needs fails the test under ``CI=true`` and skips
it, loudly, elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEST_BROKER_PORT = int(os.environ.get("ASE_TEST_BROKER_PORT", "61623"))
TEST_BROKER_HOME = ROOT / "var" / "test-activemq"
TEST_REDIS_URL = os.environ.get("ASE_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Processes started by tests (workers) read these; this process's settings are patched below.
os.environ["ASE_BROKER_URL"] = f"127.0.0.1:{TEST_BROKER_PORT}"
os.environ["ASE_BROKER_PORT"] = str(TEST_BROKER_PORT)
os.environ["REDIS_URL"] = TEST_REDIS_URL
os.environ["ASE_REGISTRY_TTL"] = "0"
os.environ["ASE_WORKER_SYNC_INTERVAL"] = "0.5"
os.environ["ASE_RECEIPT_TIMEOUT"] = "5"

pytest_plugins = [
    "tests.fixtures.services",
    "tests.fixtures.engine",
    "tests.fixtures.api",
    "tests.fixtures.console",
    "tests.fixtures.browser",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests run last: Playwright keeps an event loop running in the main thread until the end
    of the session, and Django refuses synchronous ORM calls from a thread with a running loop."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


def unavailable(what: str) -> None:
    """A required service is missing: fail in CI, skip (with the reason) elsewhere."""
    if IN_CI:
        pytest.fail(f"required service unavailable under CI=true: {what}", pytrace=False)
    pytest.skip(f"required service unavailable: {what}")


@pytest.fixture(autouse=True, scope="session")
def _test_settings() -> None:
    """Point this process at the test broker and the test Redis database."""
    from django.conf import settings

    from console.celery import app
    from console.component import installed_component

    settings.ASE_COMPONENT["broker-url"] = f"127.0.0.1:{TEST_BROKER_PORT}"
    settings.ASE_COMPONENT["receipt-timeout"] = "5"
    settings.ASE_REGISTRY_TTL = 0.0
    # Settings may be read before this module sets REDIS_URL: keep this process off the machine's database 0.
    settings.REDIS_URL = TEST_REDIS_URL
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [TEST_REDIS_URL]
    installed_component.cache_clear()
    app.conf.broker_url = TEST_REDIS_URL
    app.conf.result_backend = TEST_REDIS_URL


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.1, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@pytest.fixture
def service_name() -> str:
    """A service name no other test uses (queues outlive tests in the broker)."""
    return f"Svc{uuid.uuid4().hex[:10]}"


def _process_state(pid: int) -> str:
    """The one-letter state of a process (R, S, T...), from /proc."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


class BrokerControl:
    """The test run's ActiveMQ: start/stop/kill it, and inspect queues through STOMP."""

    def __init__(self, home: Path, port: int) -> None:
        self.home = home
        self.port = port
        self.env = {**os.environ, "ASE_BROKER_HOME": str(home), "ASE_BROKER_PORT": str(port)}

    def _script(self, verb: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ROOT / "scripts" / "activemq.sh"), verb],
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=180,
        )

    def start(self) -> None:
        self._script("start")

    def stop(self) -> None:
        self._script("stop")

    def kill(self) -> None:
        self._script("kill")

    def component(self, receipt_timeout: float = 5):  # type: ignore[no-untyped-def]
        from ase_engine.config import ComponentConfig

        return ComponentConfig(broker_url=f"127.0.0.1:{self.port}", receipt_timeout=receipt_timeout)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The broker process stopped (SIGSTOP): connections stay open, nothing is answered; SIGCONT after."""
        pid = int((self.home / "activemq.pid").read_text().strip())
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: _process_state(pid) == "T", 2, interval=0.01, what=f"broker {pid} stopped")
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def connection(self):  # type: ignore[no-untyped-def]
        from ase_engine.broker import StompConnection

        conn = StompConnection(self.component(), name=f"test-{uuid.uuid4().hex[:6]}")
        conn.connect()
        return conn

    def depth(self, queue_name: str) -> int | None:
        conn = self.connection()
        try:
            stats = conn.queue_stats([queue_name], timeout=2)[queue_name]
        finally:
            conn.disconnect()
        return None if stats is None else int(stats["size"])

    def drain(
        self, queue_name: str, expect: int | None = None, timeout: float = 10
    ) -> list[tuple[dict[str, str], bytes]]:
        """Consume (and remove) every message of a queue; waits for ``expect`` messages if given."""
        got: list[tuple[dict[str, str], bytes]] = []
        from ase_engine.broker import StompConnection, queue, wait

        conn = StompConnection(
            self.component(), name=f"drain-{uuid.uuid4().hex[:6]}", on_message=lambda h, b: got.append((h, b))
        )
        conn.connect()
        try:
            wait(conn.subscribe(queue(queue_name), "drain", ack="auto", prefetch=1000), 5)
            deadline = time.monotonic() + timeout
            last = -1
            while time.monotonic() < deadline:
                if expect is not None and len(got) >= expect:
                    break
                if expect is None and len(got) == last:
                    break
                last = len(got)
                time.sleep(0.5)
        finally:
            conn.disconnect()
        return got


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerControl]:
    if shutil.which("java") is None or not Path("/usr/share/activemq/bin/activemq.jar").exists():
        unavailable("ActiveMQ is not installed (run scripts/bootstrap.sh)")
    control = BrokerControl(TEST_BROKER_HOME, TEST_BROKER_PORT)
    control._script("stop", check=False)
    shutil.rmtree(TEST_BROKER_HOME / "data", ignore_errors=True)
    try:
        control.start()
    except subprocess.CalledProcessError as exc:
        unavailable(f"the test ActiveMQ did not start: {exc.stdout[-2000:]} {exc.stderr[-2000:]}")
    yield control
    control._script("stop", check=False)


@pytest.fixture(scope="session")
def redis_available() -> None:
    import redis

    try:
        redis.Redis.from_url(TEST_REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        unavailable(f"Redis at {TEST_REDIS_URL}: {exc}")


@pytest.fixture(autouse=True, scope="session")
def _close_thread_connections(django_db_setup, django_db_blocker) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Background threads (history recorder, ingress executor) keep database connections open; end them
    before pytest-django drops the test database."""
    yield
    from django.db import connection

    from console.history import recorder

    with django_db_blocker.unblock():
        recorder().flush()
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
