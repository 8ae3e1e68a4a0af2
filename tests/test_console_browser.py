"""The console in real headless Chromium against a live uvicorn server, real ActiveMQ, Redis,
the test database, and (where the page is live) a real Celery worker and beat."""

from __future__ import annotations

import json

import httpx
import pytest
from playwright.sync_api import expect

from console.models import Job, ServiceUnit
from tests.conftest import wait_until
from tests.test_deployment import descriptor

pytestmark = [pytest.mark.browser, pytest.mark.broker, pytest.mark.slow]


def test_login_with_a_wrong_password_is_refused_then_the_right_one_opens_the_dashboard(
    page, console_server, logged_in, console_user
):
    console_user("viewer")
    page.goto(f"{console_server.url}/")
    expect(page).to_have_url(f"{console_server.url}/login/?next=/")
    page.get_by_label("Login").fill("viewer-user")
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("did not match")

    logged_in("viewer")
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
    expect(page.locator(".who")).to_contain_text("viewer-user viewer")
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{console_server.url}/login/")


def test_a_posted_request_appears_on_the_dashboard_without_reload(
    page, console_server, logged_in, deploy, service_name, workers, beats, worker_env
):
    worker_env["ASE_DASHBOARD_INTERVAL"] = "1"
    # Sending stopped: the request stays in PENDING, where the dashboard must show it.
    deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false")
    workers()
    beats()
    logged_in("viewer")
    row = page.locator(f'tr[data-service="{service_name}"]')
    expect(row.locator('td[data-area="PENDING"]')).to_have_text("0")
    expect(page.locator("#live-status")).to_contain_text("live", timeout=15_000)
    page.evaluate("window.__sameDocument = true")

    for _ in range(2):
        response = httpx.post(f"{console_server.url}/ase/{service_name}/", content=b'{"order": 1}', timeout=10)
        assert response.status_code == 202, response.text

    expect(row.locator('td[data-area="PENDING"]')).to_have_text("2", timeout=20_000)
    expect(page.locator("#total-accepted")).not_to_have_text("0", timeout=20_000)
    expect(page.locator("#instances-count")).to_contain_text("1 live")
    assert page.evaluate("window.__sameDocument") is True  # no reload happened


def test_deploying_a_jbi_xml_upload_shows_its_warnings(page, console_server, logged_in, broker, service_name):
    xml = descriptor(
        service_name,
        provides_itf="OtherInterface",
        provides_extra=f"<ase:persistence-area-name>{service_name}_q</ase:persistence-area-name>",
        consumes_extra=f"<ase:persistence-area-name>{service_name}_q</ase:persistence-area-name>",
    )
    logged_in("admin")
    page.get_by_role("link", name="Service units").click()
    page.get_by_role("link", name="Deploy a service unit").click()
    page.get_by_label("jbi.xml or service-unit archive (.zip)").set_input_files(
        files=[{"name": "jbi.xml", "mimeType": "application/xml", "buffer": xml}]
    )
    page.get_by_role("button", name="Deploy the descriptor").click()

    result = page.locator("#deploy-result")
    expect(result).to_contain_text(f"Service unit {service_name} deployed")
    warnings = page.locator("#deploy-warnings li")
    expect(warnings).to_have_count(2)
    expect(warnings.nth(0)).to_contain_text("WARNING SE-ASE-W0003: Interface name of both sections")
    expect(warnings.nth(1)).to_contain_text("WARNING SE-ASE-W0012: The parameter 'persistence-area-name'")
    assert ServiceUnit.objects.get(service=service_name).queue_pending == f"{service_name}_q"


def test_a_viewer_sees_no_destructive_button_and_a_forged_post_is_refused(
    page, console_server, logged_in, deploy, service_name
):
    deploy(service_name, "http://127.0.0.1:9/x")
    logged_in("viewer")
    row = page.locator(f'tr[data-service="{service_name}"]')
    expect(row).to_be_visible()
    expect(page.get_by_role("button", name="stop", exact=False)).to_have_count(0)
    row.get_by_role("link", name=service_name, exact=True).click()
    expect(page.get_by_role("heading", name=service_name)).to_be_visible()
    expect(page.get_by_role("button")).to_have_count(2)  # search and log out, nothing else
    expect(page.get_by_role("link", name="Undeploy")).to_have_count(0)
    page.get_by_role("link", name="FAULT").click()
    expect(page.get_by_role("heading", name=f"{service_name} / FAULT")).to_be_visible()
    expect(page.get_by_role("button", name="Purge…")).to_have_count(0)
    expect(page.get_by_role("checkbox")).to_have_count(0)

    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    forged = page.request.post(
        f"{console_server.url}/processes/posting/stop",
        form={"csrfmiddlewaretoken": token, "service": service_name},
        headers={"Origin": console_server.url},
        max_redirects=0,
    )
    assert forged.status == 403
    assert "needs the <strong>operator</strong> role" in forged.text()
    undeploy = page.request.post(
        f"{console_server.url}/units/{service_name}/undeploy/",
        form={"csrfmiddlewaretoken": token},
        headers={"Origin": console_server.url},
        max_redirects=0,
    )
    assert undeploy.status == 403
    purge = page.request.post(
        f"{console_server.url}/areas/{service_name}/FAULT/run",
        form={"csrfmiddlewaretoken": token, "action": "purge", "everything": "1"},
        headers={"Origin": console_server.url},
        max_redirects=0,
    )
    assert purge.status == 403
    assert not Job.objects.exists()
    unit = ServiceUnit.objects.get(service=service_name)
    assert (unit.posting_started, unit.sending_started) == (True, True)


def test_operator_opens_a_faulted_message_recycles_it_with_force_and_the_target_gets_it(
    page, console_server, logged_in, deploy, service_name, target, workers, beats, broker
):
    answers = iter([(400, b'{"error": "order refused"}', "application/json")])
    url = target.on("/orders", "call", lambda headers, body: next(answers, (200, b"{}", "application/json")))
    deploy(service_name, url)  # not idempotent: a recycle needs force
    workers()
    beats()
    response = httpx.post(f"{console_server.url}/ase/{service_name}/", json={"order": 7}, timeout=10)
    assert response.status_code == 202
    message_id = response.json()["id"]

    logged_in("operator")
    fault_cell = page.locator(f'tr[data-service="{service_name}"] td[data-area="FAULT"]')
    expect(fault_cell).to_have_text("1", timeout=20_000)
    fault_cell.get_by_role("link").click()
    expect(page.get_by_role("heading", name=f"{service_name} / FAULT")).to_be_visible()
    page.get_by_role("link", name=message_id).click()
    expect(page.locator("#payload")).to_have_text('{\n  "order": 7\n}')
    expect(page.locator("#history")).to_contain_text("Fault")
    expect(page.locator("#message-location")).to_contain_text("FAULT")
    page.go_back()

    page.get_by_label(f"Select {message_id}").check()
    expect(page.locator("#selected-count")).to_have_text("1")
    page.get_by_role("button", name="Recycle…").click()
    expect(page.get_by_role("heading")).to_have_text(f"Recycle 1 message of {service_name} / FAULT?")
    expect(page.locator("#confirmation")).to_contain_text("not idempotent")
    page.get_by_label("I know; recycle anyway (force)").check()
    page.get_by_role("button", name="Recycle 1 message").click()

    expect(page.locator("#job-status")).to_have_text("succeeded", timeout=30_000)
    expect(page.locator("#job-progress")).to_have_attribute("value", "1")
    expect(page.locator("#job-result")).to_have_text("Done: 1 message recycled.")
    wait_until(lambda: len(target.bodies("/orders")) == 2, 20, what="the recycled request at the target")
    assert json.loads(target.bodies("/orders")[1]) == {"order": 7}
    wait_until(lambda: broker.depth(f"{service_name}_fault") == 0, 10, what="an empty fault area")


def test_operator_purges_all_messages_matching_a_filter(
    page, console_server, logged_in, deploy, service_name, broker, workers
):
    from tests.test_api_areas import fill

    deploy(service_name, "http://127.0.0.1:9/x", mustBeAutomaticallyStarted="false")
    fill(broker, f"{service_name}_fault", 20, service_name, last_outcome="fault", last_error="order refused")
    kept = fill(broker, f"{service_name}_fault", 10, service_name, last_outcome="fault", last_error="stock exhausted")
    workers()

    logged_in("operator")
    page.goto(f"{console_server.url}/areas/{service_name}/FAULT/")
    expect(page.locator("#area-depth")).to_have_text("30 messages")
    page.get_by_label("Last outcome contains").fill("refused")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator('input[name="ids"]')).to_have_count(20)
    page.get_by_label("all messages matching the filter").check()
    page.get_by_role("button", name="Purge…").click()
    expect(page.get_by_role("heading")).to_have_text(f"Purge 20 messages of {service_name} / FAULT?")
    page.get_by_role("button", name="Purge 20 messages").click()

    expect(page.locator("#job-status")).to_have_text("succeeded", timeout=30_000)
    expect(page.locator("#job-count")).to_have_text("20 of 20 messages")
    assert broker.depth(f"{service_name}_fault") == 10
    page.goto(f"{console_server.url}/areas/{service_name}/FAULT/")
    rows = page.locator("table.messages tbody th a")
    expect(rows).to_have_count(10)
    assert rows.all_inner_texts() == kept


def test_the_console_works_with_the_keyboard_and_on_a_narrow_screen(
    page, console_server, console_user, deploy, service_name
):
    from tests.fixtures.console import PASSWORD

    deploy(service_name, "http://127.0.0.1:9/x")
    console_user("operator")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{console_server.url}/login/")
    expect(page.get_by_label("Login")).to_be_focused()  # the login field has the focus at once
    page.keyboard.type("operator-user")
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{console_server.url}/")
    expect(page.locator(f'tr[data-service="{service_name}"]')).to_be_visible()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    # Wide tables scroll inside their card; the page itself never scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    toggle = page.get_by_role("button", name=f"stop sending of {service_name}")
    toggle.focus()
    page.keyboard.press("Enter")
    expect(page.locator(".flash")).to_contain_text(f"Sending process stopped: {service_name}.")
    assert not ServiceUnit.objects.get(service=service_name).sending_started


def test_an_operator_launches_a_report_sees_its_progress_then_the_charts_and_downloads_a_csv(
    page, console_server, logged_in, workers, worker_env
):
    from console.history_store import bulk_load
    from tests.fixtures.history import history

    worker_env.update(SPARK_MASTER="local[2]", ASE_REPORT_PARTITIONS="2")
    bulk_load(history())  # the small hand-computed history of tests/test_reports.py, in the real history store
    workers()

    logged_in("operator")
    page.get_by_role("link", name="Reports").click()
    page.get_by_label("From (UTC)").fill("2026-01-01T10:00")
    page.get_by_label("To (UTC, excluded)").fill("2026-01-01T12:00")
    page.get_by_role("button", name="Launch report").click()

    expect(page.get_by_role("heading", level=1)).to_contain_text("2026-01-01 10:00 → 2026-01-01 12:00 UTC")
    page.evaluate(
        """() => { window.__seen = [];
        new MutationObserver(() => window.__seen.push([document.getElementById("report-stage").textContent,
            document.getElementById("report-progress").value]))
          .observe(document.getElementById("report-stage"), { childList: true, characterData: true }); }"""
    )
    expect(page.locator("#report-stage")).to_contain_text("stage", timeout=90_000)  # the Spark stages, live
    expect(page.locator("#report-status")).to_have_text("succeeded", timeout=120_000)
    expect(page.locator("#report-progress")).to_have_attribute("value", "1")
    seen = page.evaluate("window.__seen")
    assert any(0 < value < 1 for _, value in seen), f"the bar moved while Spark ran: {seen}"
    assert [value for _, value in seen] == sorted(value for _, value in seen), seen
    expect(page.locator("#results")).to_be_visible()

    # Outcomes per hour: one line per outcome over the two hours; the acked line has the hand-computed counts.
    acked = page.locator('#chart-outcomes polyline[data-series="acked"]')
    expect(acked).to_have_count(1)
    assert len(acked.get_attribute("points").split()) == 2
    # Hand-computed (tests/fixtures/history.py): 10:00 alpha edge, m1..m9, r1 (11) + beta b1..b4 (4); 11:00 none.
    acked_points = page.locator("#chart-outcomes circle.s-acked title")
    expect(acked_points).to_have_text(["01-01 10:00 UTC: 15 acked", "01-01 11:00 UTC: 0 acked"])
    # Latency: p50/p95/p99 bars per service; attempts and reasons as bars.
    beta_p50 = page.locator('#chart-latency rect[data-group="beta"][data-key="p50"] title')
    expect(beta_p50).to_have_text("beta p50: 2,000 ms")
    expect(page.locator("#chart-latency rect.bar")).to_have_count(6)
    expect(page.locator("#chart-attempts rect.bar").first).to_be_visible()
    expect(page.locator('#chart-reasons rect[data-reason="no such product"]')).to_have_count(1)
    # Tables, and a CSV download through the link.
    attempts = page.locator('section[data-report="attempts"]')
    expect(attempts.locator("tbody tr")).not_to_have_count(0)
    with page.expect_download() as download:
        attempts.get_by_role("link", name="Download attempts as CSV").click()
    text = open(download.value.path()).read()
    assert text.startswith("service,attempts,messages\n") and "beta,1,5\n" in text


def test_the_dashboard_shows_an_open_breaker_in_red_and_the_blocked_group_linked_to_its_message(
    page, console_server, logged_in, deploy, broker, redis_available, service_name
):
    import redis

    from ase_engine.ordering import OrderedGroups
    from ase_engine.protection import Protection
    from tests.conftest import TEST_REDIS_URL

    unit = deploy(
        service_name,
        "http://127.0.0.1:9/never",
        mustBeAutomaticallyStarted="false",
        **{"circuit-breaker-threshold": "2", "ordered-groups": "true"},
    ).unit.to_config()
    client = redis.Redis.from_url(TEST_REDIS_URL)
    shared, groups = Protection(client, "w1"), OrderedGroups(client)
    for _ in range(2):
        shared.record(unit, failed=True)
    groups.block(unit, "customer-42", "msg-head-0001", "retry 1 of 3 scheduled")
    try:
        logged_in("viewer")
        cell = page.locator(f'tr[data-service="{service_name}"] td.breaker')
        expect(cell.locator(".state")).to_have_text("open")
        expect(cell.locator(".state")).to_have_class("state state-bad")
        expect(cell).to_contain_text("2/2 failures · opened 1×")
        row = page.locator('#groups-body tr[data-group="customer-42"]')
        expect(row).to_contain_text("retry 1 of 3 scheduled")
        row.get_by_role("link", name="msg-head-0001").click()
        expect(page).to_have_url(f"{console_server.url}/messages/msg-head-0001/")
    finally:
        shared.reset(service_name)
        groups.release(service_name, "customer-42")
