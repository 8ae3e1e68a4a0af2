"""Purge (ADM-010) and recycle (ADM-015) through the admin API, as jobs, against the real broker."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from ase_engine.message import Message
from console import jobs
from console.component import installed_component
from console.history import recorder
from console.models import AuditEntry, Job, MessageEvent, ServiceUnit
from tests.conftest import wait_until
from tests.test_api_areas import fill

pytestmark = pytest.mark.broker


@pytest.fixture
def unit(deploy, service_name):  # type: ignore[no-untyped-def]
    return deploy(
        service_name,
        "http://127.0.0.1:9/x",
        **{"is-idempotent": "true", "retry-policy-number": "1", "mustBeAutomaticallyStarted": "false"},
    ).unit.to_config()


@pytest.fixture
def non_idempotent(deploy, service_name):  # type: ignore[no-untyped-def]
    return deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false").unit.to_config()


@pytest.fixture
def dead_broker(settings):  # type: ignore[no-untyped-def]
    """Point this process at a port where no broker listens."""

    def _kill() -> None:
        settings.ASE_COMPONENT = {**settings.ASE_COMPONENT, "broker-url": "127.0.0.1:9", "receipt-timeout": "1"}
        installed_component.cache_clear()

    yield _kill
    installed_component.cache_clear()


def start(client, service: str, subtype: str, action: str, **body) -> dict:  # type: ignore[no-untyped-def]
    response = client.post(f"/api/areas/{service}/{subtype}/{action}", body, format="json")
    assert response.status_code == 202, response.content
    return response.json()


def remaining_ids(broker, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [Message.from_frame(h, b).id for h, b in broker.drain(name)]


def test_purge_of_a_whole_area_runs_as_a_job_and_leaves_history(api, broker, unit):
    ids = fill(broker, unit.areas.error, 30, unit.service)

    job = start(api("operator"), unit.service, "ERROR", "purge")
    jobs.run_job(job["id"])

    assert job["status"] == "queued" and job["requested_by"] == "operator-user"
    assert broker.depth(unit.areas.error) == 0
    done = api("viewer").get(f"/api/jobs/{job['id']}/").json()
    assert (done["status"], done["total"], done["done"], done["progress"]) == ("succeeded", 30, 30, 1.0)
    recorder().flush()
    purged = MessageEvent.objects.filter(kind="purged", service=unit.service)
    assert sorted(purged.values_list("message_id", flat=True)) == sorted(ids)
    assert AuditEntry.objects.get(action="area.purge").parameters["subtype"] == "ERROR"


def test_a_whole_area_is_moved_over_successive_connections(api, broker, unit, settings):
    settings.ASE_ADMIN_PER_CONNECTION = 7
    settings.ASE_ADMIN_BATCH = 3
    ids = fill(broker, unit.areas.timedout, 25, unit.service)

    job = start(api("operator"), unit.service, "TIMEDOUT", "recycle")
    result = jobs.run_job(job["id"])

    assert (result["done"], result["scanned"]) == (25, 25)
    assert broker.depth(unit.areas.timedout) == 0
    assert [Message.from_frame(h, b).id for h, b in broker.drain(unit.areas.pending, expect=25)] == ids


def test_purge_of_listed_ids_keeps_the_others_in_order(api, broker, unit):
    ids = fill(broker, unit.areas.fault, 10, unit.service)

    job = start(api("operator"), unit.service, "FAULT", "purge", ids=[ids[2], ids[5], "no-such-id"])
    result = jobs.run_job(job["id"])

    assert result["done"] == 2 and result["not_found"] == ["no-such-id"]
    assert remaining_ids(broker, unit.areas.fault) == [i for n, i in enumerate(ids) if n not in (2, 5)]


def test_purge_by_filter_takes_only_matching_messages(api, broker, unit):
    refused = fill(broker, unit.areas.error, 4, unit.service, last_error="Connection refused by peer")
    unavailable = fill(broker, unit.areas.error, 3, unit.service, last_error="HTTP 503")

    job = start(api("operator"), unit.service, "ERROR", "purge", error_contains="REFUSED")
    jobs.run_job(job["id"])

    assert Job.objects.get(pk=job["id"]).done == len(refused)
    assert remaining_ids(broker, unit.areas.error) == unavailable


def test_purge_of_messages_posted_before_a_time(api, broker, unit):
    old = fill(broker, unit.areas.expired, 3, unit.service, incoming_timestamp=1_600_000_000_000)
    new = fill(broker, unit.areas.expired, 2, unit.service)

    job = start(api("operator"), unit.service, "EXPIRED", "purge", posted_before="2021-01-01T00:00:00Z")
    jobs.run_job(job["id"])

    assert Job.objects.get(pk=job["id"]).done == len(old)
    assert remaining_ids(broker, unit.areas.expired) == new


def test_recycle_moves_back_to_pending_resetting_timestamp_and_attempts(api, broker, unit):
    ids = fill(
        broker,
        unit.areas.error,
        5,
        unit.service,
        attempt=4,
        incoming_timestamp=1_600_000_000_000,
        properties={"customer": "acme"},
        last_outcome="error",
    )
    before = time.time() * 1000

    job = start(api("operator"), unit.service, "ERROR", "recycle")
    jobs.run_job(job["id"])

    assert broker.depth(unit.areas.error) == 0
    recycled = [Message.from_frame(h, b) for h, b in broker.drain(unit.areas.pending, expect=5)]
    assert [m.id for m in recycled] == ids
    assert all(m.attempt == 0 and m.incoming_timestamp >= before for m in recycled)
    assert recycled[0].properties == {"customer": "acme"} and recycled[0].payload == b'{"n": 0}'
    recorder().flush()
    assert MessageEvent.objects.filter(kind="recycled", message_id=ids[0], area=unit.areas.pending).exists()


def test_recycle_of_pending_is_refused_with_e0012(api, broker, unit):
    response = api("operator").post(f"/api/areas/{unit.service}/PENDING/recycle", {}, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "error": f"ERROR SE-ASE-E0012: The persistence area '{unit.service}' with sub-type PENDING can not be recycled."
    }
    assert not Job.objects.exists()


def test_recycle_to_a_non_idempotent_target_needs_force_e0013(api, broker, non_idempotent):
    fill(broker, non_idempotent.areas.timedout, 2, non_idempotent.service)
    operator = api("operator")

    refused = operator.post(f"/api/areas/{non_idempotent.service}/TIMEDOUT/recycle", {}, format="json")
    forced = start(operator, non_idempotent.service, "TIMEDOUT", "recycle", force=True)
    jobs.run_job(forced["id"])

    assert refused.status_code == 400
    assert refused.json()["error"] == (
        "ERROR SE-ASE-E0013: The target service provider is not idempotent. Use the boolean flag to force the "
        f"recycling of the persistence area '{non_idempotent.service}/TIMEDOUT'."
    )
    assert broker.depth(non_idempotent.areas.pending) == 2


def test_purge_of_an_unknown_area_is_404_e0009_and_bad_subtype_400_e0021(api, broker, unit):
    operator = api("operator")

    unknown = operator.post("/api/areas/NoSuchService/ERROR/purge", {}, format="json")
    bad = operator.post(f"/api/areas/{unit.service}/WRONG/purge", {}, format="json")

    assert unknown.status_code == 404 and unknown.json()["error"].startswith("ERROR SE-ASE-E0009: ")
    assert bad.status_code == 400 and bad.json()["error"].startswith("ERROR SE-ASE-E0021: ")
    assert not Job.objects.exists()


def test_purge_with_the_broker_down_is_503_with_e0008_and_recycle_with_e0018(api, broker, unit, dead_broker, caplog):
    dead_broker()
    operator = api("operator")

    purge = operator.post(f"/api/areas/{unit.service}/ERROR/purge", {}, format="json")
    recycle = operator.post(f"/api/areas/{unit.service}/ERROR/recycle", {}, format="json")

    assert purge.status_code == 503
    assert purge.json()["error"].startswith(
        f"ERROR SE-ASE-E0008: An error occurs purging the persistence area {unit.service}/ERROR: "
    )
    assert recycle.status_code == 503
    assert recycle.json()["error"].startswith(
        f"ERROR SE-ASE-E0018: An error occurs recycling the persistence area {unit.service}/ERROR: "
    )
    assert not any(r.exc_info for r in caplog.records)
    assert not Job.objects.exists()


def test_a_job_that_loses_the_broker_fails_with_e0008(api, broker, unit, dead_broker):
    fill(broker, unit.areas.error, 3, unit.service)
    job = start(api("operator"), unit.service, "ERROR", "purge")
    dead_broker()

    jobs.run_job(job["id"])

    failed = Job.objects.get(pk=job["id"])
    assert failed.status == "failed"
    assert failed.error.startswith(f"ERROR SE-ASE-E0008: An error occurs purging the persistence area {unit.service}")
    assert broker.depth(unit.areas.error) == 3


def test_posting_waits_while_a_purge_of_the_service_runs(api, broker, unit, ingress, settings):
    ServiceUnit.objects.filter(service=unit.service).update(posting_started=True)
    job = Job.objects.create(
        kind="purge", service=unit.service, subtype="ERROR", status="running", heartbeat_at=timezone.now()
    )
    answers: list[int] = []
    poster = threading.Thread(target=lambda: answers.append(ingress.post(unit.service).status_code))

    poster.start()
    time.sleep(1.0)
    assert answers == [], "posting must wait while the purge runs"
    Job.objects.filter(pk=job.pk).update(status="succeeded")
    poster.join(10)

    assert answers == [202]
    assert broker.depth(unit.areas.pending) == 1


def test_posting_gives_up_with_e0011_if_the_purge_outlasts_the_wait(api, broker, unit, ingress, settings):
    settings.ASE_ADMIN_POSTING_WAIT = 0.5
    ServiceUnit.objects.filter(service=unit.service).update(posting_started=True)
    Job.objects.create(
        kind="purge", service=unit.service, subtype="ERROR", status="running", heartbeat_at=timezone.now()
    )

    response = ingress.post(unit.service)

    assert response.status_code == 503
    assert response.json()["error"] == (
        f"ERROR SE-ASE-E0011: An error occurs saving a request in the persistence area '{unit.areas.pending}': "
        "a purge or recycle of the persistence area is running."
    )


def test_a_job_whose_worker_died_blocks_nothing_and_is_taken_over(api, broker, unit, ingress):
    fill(broker, unit.areas.error, 4, unit.service)
    job = start(api("operator"), unit.service, "ERROR", "purge")
    stale = timezone.now() - timedelta(seconds=120)
    Job.objects.filter(pk=job["id"]).update(status="running", started_at=stale, heartbeat_at=stale)

    assert ingress.post(unit.service).status_code == 202, "a dead job must not hold posting"
    jobs.run_job(job["id"])

    assert Job.objects.get(pk=job["id"]).status == "succeeded"
    assert broker.depth(unit.areas.error) == 0


def test_a_running_job_is_not_run_twice(api, broker, unit):
    fill(broker, unit.areas.error, 2, unit.service)
    job = start(api("operator"), unit.service, "ERROR", "purge")
    Job.objects.filter(pk=job["id"]).update(status="running", heartbeat_at=timezone.now())

    assert jobs.run_job(job["id"]) == {"skipped": "not queued"}
    assert broker.depth(unit.areas.error) == 2


@pytest.mark.slow
def test_a_real_worker_runs_the_job_and_its_progress_is_visible(api, broker, unit, workers):
    fill(broker, unit.areas.fault, 500, unit.service)
    workers()

    job = start(api("operator"), unit.service, "FAULT", "purge")

    viewer = api("viewer")
    wait_until(lambda: viewer.get(f"/api/jobs/{job['id']}/").json()["status"] == "succeeded", 30, what="job done")
    final = viewer.get(f"/api/jobs/{job['id']}/").json()
    assert (final["done"], final["total"]) == (500, 500)
    assert final["result"]["per_queue"] == {unit.areas.fault: 500}
    assert broker.depth(unit.areas.fault) == 0


@pytest.fixture
def dead_celery_broker():  # type: ignore[no-untyped-def]
    """Point this process's Celery app at a Redis that does not listen; restored afterwards."""
    from console.celery import app

    def reset() -> None:
        # Drop the cached pools (not close them: other caches may still point at them) so the next send connects
        # with the current broker_url.
        app._pool = None
        app.amqp._producer_pool = None

    original = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    reset()
    yield
    app.conf.broker_url = original
    reset()


def test_a_job_that_cannot_be_queued_fails_with_e0008_at_once(api, broker, unit, dead_celery_broker):
    fill(broker, unit.areas.error, 1, unit.service)

    job = start(api("operator"), unit.service, "ERROR", "purge")

    failed = Job.objects.get(pk=job["id"])
    assert failed.status == "failed"
    assert failed.error.startswith(
        f"ERROR SE-ASE-E0008: An error occurs purging the persistence area {unit.service}/ERROR: "
        "the job could not be queued: OperationalError"
    )
    assert broker.depth(unit.areas.error) == 1
