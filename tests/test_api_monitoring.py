"""Monitoring: component status (MON-000, MON-010) and the Prometheus /metrics endpoint."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from console.component import installed_component
from console.models import BrokerStatus, MessageEvent, WorkerInstance
from console.monitoring import probe
from tests.conftest import wait_until
from tests.test_api_areas import fill

pytestmark = pytest.mark.broker


@pytest.fixture
def unit(deploy, service_name):  # type: ignore[no-untyped-def]
    return deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false").unit.to_config()


def test_connection_status_is_updated_by_an_interaction_and_by_the_probe(api, broker, unit, settings):
    api("viewer").get("/api/areas/")
    assert BrokerStatus.objects.get(pk=1).connected

    settings.ASE_COMPONENT = {**settings.ASE_COMPONENT, "broker-url": "127.0.0.1:9", "receipt-timeout": "1"}
    installed_component.cache_clear()
    try:
        assert probe()["connected"] is False
        row = BrokerStatus.objects.get(pk=1)
        assert (row.connected, row.source) == (False, "probe") and row.last_error
        # Reading the status talks to the broker too (area depths), and says how that went.
        status = api("viewer").get("/api/component/status/").json()
        assert status["connection"]["status"] == "disconnected"
        assert status["connection"]["source"] == "areas" and status["connection"]["last_error"]
    finally:
        installed_component.cache_clear()
    settings.ASE_COMPONENT = {**settings.ASE_COMPONENT, "broker-url": f"127.0.0.1:{broker.port}"}
    assert probe()["connected"] is True
    assert api("viewer").get("/api/component/status/").json()["connection"]["status"] == "connected"


def test_the_probe_is_scheduled_by_celery_beat(settings):
    schedule = settings.CELERY_BEAT_SCHEDULE["ase-broker-probe"]
    assert schedule["task"] == "console.tasks.probe_broker"
    assert schedule["schedule"] == settings.ASE_BROKER_PROBE_INTERVAL


@pytest.mark.slow
def test_status_shows_every_instance_its_processes_and_the_depths(api, broker, unit, workers):
    fill(broker, unit.areas.error, 2, unit.service)
    api("operator").post(f"/api/processes/sending/start?service={unit.service}")
    worker = workers()
    wait_until(
        lambda: unit.service in WorkerInstance.objects.get(name=worker.name).sending_services, 10, what="subscribed"
    )

    status = api("viewer").get("/api/component/status/").json()

    (instance,) = [i for i in status["instances"] if i["name"] == worker.name]
    assert instance["alive"] and instance["connection_status"] == "connected"
    assert unit.service in instance["sending_services"]
    assert {"service": unit.service, "posting": True, "sending": True} in status["services"]
    depths = {(a["service"], a["subtype"]): a["depth"] for a in status["areas"]}
    assert depths[(unit.service, "ERROR")] == 2
    assert status["connection"]["status"] == "connected"


def test_metrics_expose_depths_counts_and_latency_in_prometheus_format(api, broker, unit):
    fill(broker, unit.areas.fault, 3, unit.service)
    now = timezone.now()
    for kind, duration in (("posted", None), ("posted", None), ("acked", 40), ("fault", 300)):
        MessageEvent.objects.create(message_id="m", service=unit.service, kind=kind, at=now, duration_ms=duration)

    response = Client().get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    text = response.content.decode()
    assert f'ase_area_depth{{service="{unit.service}",subtype="FAULT"}} 3.0' in text
    assert f'ase_messages{{event="accepted",service="{unit.service}"}} 2.0' in text
    assert f'ase_messages{{event="delivered",service="{unit.service}"}} 1.0' in text
    assert f'ase_target_latency_seconds_bucket{{le="0.05",service="{unit.service}"}} 1.0' in text
    assert f'ase_target_latency_seconds_bucket{{le="+Inf",service="{unit.service}"}} 2.0' in text
    assert f'ase_target_latency_seconds_sum{{service="{unit.service}"}} 0.34' in text
    assert "ase_broker_connected 1.0" in text


def test_metrics_need_the_bearer_token_when_one_is_set(transactional_db, settings):
    settings.ASE_METRICS_TOKEN = "s3cret"

    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
