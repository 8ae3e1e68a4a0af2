"""The component's parameters and its connection (SE-ASE-000, SE-ASE-010, CFG-005, CFG-010)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest

from console.checks import check_component_parameters
from console.component import component_config, installed_component
from console.logformat import OneLineFormatter
from console.models import ComponentSettings, WorkerInstance
from tests.conftest import ROOT, wait_until


@pytest.fixture
def component_settings(settings):  # type: ignore[no-untyped-def]
    def _set(**values: str) -> None:
        settings.ASE_COMPONENT = {**settings.ASE_COMPONENT, **values}
        installed_component.cache_clear()

    yield _set
    installed_component.cache_clear()


@pytest.mark.parametrize(
    ("values", "code", "text"),
    [
        ({"broker-transport": ""}, "SE-ASE-E0002", "The mandatory parameter 'Broker transport' is not set"),
        ({"broker-transport": "amqp"}, "SE-ASE-E0003", "Broker transport not supported: amqp."),
        ({"broker-url": ""}, "SE-ASE-E0004", "The mandatory parameter 'Broker URL' is not set"),
        ({"broker-url": "localhost"}, "SE-ASE-E0015", "The mandatory parameter 'Broker URL' is malformed"),
        ({"broker-vhost": " "}, "SE-ASE-E0005", "The mandatory parameter 'Broker virtual host' is not set"),
    ],
)
def test_bad_connection_parameters_fail_the_system_check(component_settings, values, code, text):
    component_settings(**values)

    (error,) = check_component_parameters(None)

    assert error.id == code
    assert error.msg == f"ERROR {code}: {text}"


@pytest.mark.parametrize(
    ("values", "code", "default"),
    [({"time-to-live": "ten"}, "SE-ASE-W0014", 0), ({"stop-timeout": "-5"}, "SE-ASE-W0015", 60)],
)
def test_bad_runtime_parameters_warn_and_use_the_default(component_settings, values, code, default):
    component_settings(**values)

    (warning,) = check_component_parameters(None)

    assert warning.id == code
    config, _ = installed_component()
    assert (config.time_to_live if code == "SE-ASE-W0014" else config.stop_timeout) == default


def test_manage_py_refuses_to_start_with_a_malformed_broker_url():
    env = {**os.environ, "ASE_BROKER_URL": "not a url", "DJANGO_SETTINGS_MODULE": "console.settings"}

    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode != 0
    assert "ERROR SE-ASE-E0015: The mandatory parameter 'Broker URL' is malformed" in result.stderr
    assert "Traceback" not in result.stderr


def test_runtime_parameters_are_hot_updated_from_the_database(db):
    ComponentSettings.objects.update_or_create(pk=1, defaults={"time_to_live": 120, "stop_timeout": 7})

    config = component_config()

    assert (config.time_to_live, config.stop_timeout) == (120, 7)


@pytest.mark.broker
@pytest.mark.slow
def test_worker_with_an_unreachable_broker_logs_e0006_and_keeps_trying(workers, worker_env, broker):
    worker_env["ASE_BROKER_URL"] = "127.0.0.1:9"

    worker = workers(ready=False)
    wait_until(lambda: "SE-ASE-E0006" in worker.log, 60, what="E0006 in the worker log")
    time.sleep(1.0)

    assert worker.proc.poll() is None, "the worker must not die when the broker is down"
    assert "SE-ASE-E0006: An error occurs during the connection to the persistence service: " in worker.log
    assert worker.log.count("SE-ASE-E0006") == 1, "an outage is logged once, not once per retry"
    assert "Traceback" not in worker.log
    wait_until(
        lambda: WorkerInstance.objects.filter(name=worker.name, connection_status="disconnected").exists(),
        10,
        what="the instance reported as disconnected",
    )


def test_log_records_never_carry_a_stack_trace():
    formatter = OneLineFormatter("%(levelname)s %(message)s")
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("t").makeRecord("t", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())

    assert formatter.format(record) == "ERROR failed | ValueError: boom"
