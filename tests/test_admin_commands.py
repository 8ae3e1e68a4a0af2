"""``manage.py ase ...`` mirrors the admin API: same functions, same codes, same audit."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from console.models import AuditEntry, ComponentSettings, Job
from console.roles import Role, role_of
from tests.test_api_areas import fill

pytestmark = pytest.mark.broker


@pytest.fixture
def unit(deploy, service_name):  # type: ignore[no-untyped-def]
    return deploy(
        service_name, "http://127.0.0.1:9/x", **{"is-idempotent": "true", "mustBeAutomaticallyStarted": "false"}
    ).unit.to_config()


def run(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("ase", *args, stdout=out)
    return out.getvalue()


def test_areas_browse_and_purge_from_the_command_line(broker, unit):
    ids = fill(broker, unit.areas.error, 4, unit.service)

    listing = run("areas", "--service", unit.service)
    page = json.loads(run("browse", unit.service, "ERROR", "--limit", "2"))
    purged = run("purge", unit.service, "ERROR", "--id", ids[0], "--id", ids[3])

    assert f"{unit.service}\tERROR\t4\t{unit.areas.error}=4" in listing
    assert [m["id"] for m in page["messages"]] == ids[:2]
    assert "succeeded, 2/2" in purged
    assert broker.depth(unit.areas.error) == 2
    entry = AuditEntry.objects.get(action="area.purge")
    assert entry.username == "(command line)" and entry.succeeded


def test_recycle_from_the_command_line_reports_e0012_as_an_error(broker, unit):
    with pytest.raises(CommandError) as error:
        run("recycle", unit.service, "PENDING")

    assert str(error.value) == (
        f"ERROR SE-ASE-E0012: The persistence area '{unit.service}' with sub-type PENDING can not be recycled."
    )


def test_recycle_in_the_background_leaves_a_queued_job(broker, unit, redis_available):
    fill(broker, unit.areas.fault, 1, unit.service)

    out = run("recycle", unit.service, "FAULT", "--background")

    job = Job.objects.get()
    assert out.strip() == f"job {job.pk} queued: ase job {job.pk}"
    assert run("job", str(job.pk)).strip() == f"job {job.pk} recycle {unit.service}/FAULT: queued, 0/0"


def test_process_warning_is_printed_and_not_an_error(broker, unit):
    assert run("posting", "start", "--service", unit.service).strip() == (
        "WARNING SE-ASE-W0018: The posting process is already started. Operation aborted."
    )


def test_component_status_grant_and_token(broker, unit):
    assert run("component", "--time-to-live", "42").strip() == "time-to-live=42 stop-timeout=60"
    assert ComponentSettings.load().time_to_live == 42
    status = json.loads(run("status"))
    assert status["connection"]["status"] == "connected"
    User.objects.create_user("scripter")
    assert run("grant", "scripter", "operator").strip() == "scripter is now operator"
    assert role_of(User.objects.get(username="scripter")) == Role.OPERATOR
    token = run("token", "scripter").strip()
    assert len(token) == 40 and run("token", "scripter").strip() == token


def test_negative_component_value_is_refused(broker, unit):
    with pytest.raises(CommandError, match="an integer number >= 0"):
        run("component", "--stop-timeout", "-3")
