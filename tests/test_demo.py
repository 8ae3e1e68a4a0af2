"""The README's run command, end to end: scripts/up.sh brings the product up, a request reaches the demo
target, a request the target faults on lands in the fault area, scripts/down.sh stops everything."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from ase_engine.broker import StompConnection
from ase_engine.config import ComponentConfig
from tests.conftest import ROOT, free_port, wait_until

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def http(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_run_command_brings_up_a_working_demo(tmp_path: Path, broker) -> None:  # type: ignore[no-untyped-def]
    http_port, target_port, broker_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "ASE_VAR_DIR": str(tmp_path / "var"),
        "ASE_HTTP_PORT": str(http_port),
        "ASE_DEMO_TARGET_PORT": str(target_port),
        "ASE_BROKER_PORT": str(broker_port),
        "ASE_BROKER_URL": f"127.0.0.1:{broker_port}",
        "ASE_WEB_WORKERS": "1",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'ase.sqlite3'}",
        "REDIS_URL": "redis://127.0.0.1:6379/12",
        "ASE_ADMIN_PASSWORD": "demo-password",
    }
    env.pop("ASE_BROKER_HOME", None)
    try:
        up = subprocess.run(
            [str(ROOT / "scripts" / "up.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert f"http://127.0.0.1:{http_port}/" in up.stdout
        assert "admin / demo-password" in up.stdout

        status, body = http("POST", f"http://127.0.0.1:{http_port}/ase/OrderServiceAssured/", b'{"order": 1}')
        assert status == 202, body
        order_id = json.loads(body)["id"]
        status, body = http("POST", f"http://127.0.0.1:{http_port}/ase/FaultyServiceAssured/", b'{"order": 2}')
        assert status == 202, body

        def received() -> list[dict]:  # type: ignore[type-arg]
            return json.loads(http("GET", f"http://127.0.0.1:{target_port}/received")[1])

        wait_until(
            lambda: any(r["headers"].get("X-ASE-Message-Id") == order_id for r in received()),
            30,
            what="the order at the demo target",
        )
        connection = StompConnection(ComponentConfig(broker_url=f"127.0.0.1:{broker_port}"), name="demo-test")
        connection.connect()
        try:
            wait_until(
                lambda: (
                    (connection.queue_stats(["FaultyServiceAssured_fault"])["FaultyServiceAssured_fault"] or {}).get(
                        "size"
                    )
                    == 1
                ),
                30,
                what="the faulted request in FaultyServiceAssured_fault",
            )
        finally:
            connection.disconnect()
    finally:
        down = subprocess.run(
            [str(ROOT / "scripts" / "down.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
        )
    assert down.returncode == 0, down.stdout[-2000:] + down.stderr[-2000:]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=2)
