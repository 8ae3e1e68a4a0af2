"""Screenshots of every console page for the README (docs/screenshots/), in headless Chromium at 1280x800
and one narrow screen. Not part of the suite (the file name is not test_*): run it on purpose with

    .venv/bin/python -m pytest -p no:cacheprovider tests/screenshots.py

It uses the same real services as the browser tests (live server, worker, beat, broker, database).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.conftest import wait_until
from tests.test_api_areas import fill
from tests.test_deployment import descriptor

pytestmark = [pytest.mark.browser, pytest.mark.broker, pytest.mark.slow]

OUT = Path(__file__).resolve().parents[1] / "docs" / "screenshots"


def test_screenshots_of_every_page(page, console_server, logged_in, deploy, target, workers, beats, broker, worker_env):
    worker_env["ASE_DASHBOARD_INTERVAL"] = "1"
    OUT.mkdir(parents=True, exist_ok=True)
    base = console_server.url
    refuse = iter([(400, b'{"error": "unknown customer"}', "application/json")] * 7)
    deploy("OrderServiceAssured", target.on("/orders", 200, b"{}", "application/json"), **{"is-idempotent": "true"})
    deploy(
        "InvoiceService", target.on("/invoices", "call", lambda h, b: next(refuse, (200, b"{}", "application/json")))
    )
    deploy("StockService", "http://127.0.0.1:9/stock", mustBeAutomaticallyStarted="false")
    workers()
    beats()
    for n in range(12):
        httpx.post(f"{base}/ase/OrderServiceAssured/", json={"order": n}, headers={"Idempotency-Key": f"ord-{n}"})
    for n in range(7):
        httpx.post(
            f"{base}/ase/InvoiceService/",
            content=json.dumps({"invoice": 1000 + n, "customer": "ACME", "lines": [{"sku": "A-1", "qty": 2}]}),
            headers={"Content-Type": "application/json", "X-ASE-Property-region": "eu-west"},
        )
    for n in range(3):
        httpx.post(
            f"{base}/ase/StockService/",
            content=f"<stock><sku>A-{n}</sku></stock>",
            headers={"Content-Type": "application/xml"},
        )
    fill(
        broker,
        "StockService_error",
        25,
        "StockService",
        last_outcome="error",
        last_status=503,
        last_error="Service Unavailable",
        attempt=4,
    )
    wait_until(lambda: broker.depth("InvoiceService_fault") == 7, 30, what="faults")

    def shot(name: str) -> None:
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(OUT / f"{name}.png"))

    page.goto(f"{base}/login/")
    shot("login")
    logged_in("admin")
    expect(page.locator('tr[data-service="InvoiceService"] td[data-area="FAULT"]')).to_have_text("7", timeout=20_000)
    expect(page.locator("#live-status")).to_contain_text("live", timeout=15_000)
    shot("dashboard")
    page.goto(f"{base}/units/")
    shot("service-units")
    page.goto(f"{base}/units/InvoiceService/")
    shot("service-unit")
    page.goto(f"{base}/units/deploy/")
    page.get_by_label("jbi.xml or service-unit archive (.zip)").set_input_files(
        files=[
            {
                "name": "jbi.xml",
                "mimeType": "application/xml",
                "buffer": descriptor(
                    "PaymentService",
                    provides_itf="OtherInterface",
                    provides_extra="<ase:persistence-area-name>payments</ase:persistence-area-name>",
                    consumes_extra="<ase:persistence-area-name>payments</ase:persistence-area-name>",
                ),
            }
        ]
    )
    page.get_by_role("button", name="Deploy the descriptor").click()
    shot("deploy-warnings")
    page.goto(f"{base}/units/StockService/undeploy/")
    shot("undeploy")
    page.goto(f"{base}/areas/")
    shot("areas")
    page.goto(f"{base}/areas/InvoiceService/FAULT/")
    first = page.locator("table.messages tbody th a").first.inner_text()
    page.locator('input[name="ids"]').nth(0).check()
    page.locator('input[name="ids"]').nth(1).check()
    shot("area-browser")
    page.get_by_role("button", name="Recycle…").click()
    shot("recycle-confirmation")
    page.goto(f"{base}/messages/{first}/")
    shot("message")
    page.goto(f"{base}/areas/StockService/PENDING/")
    page.locator("table.messages tbody th a").first.click()
    shot("message-xml")
    page.goto(f"{base}/areas/StockService/ERROR/")
    page.get_by_label("all 25 messages of the area").check()
    page.get_by_role("button", name="Purge…").click()
    page.get_by_role("button", name="Purge 25 messages").click()
    expect(page.locator("#job-status")).to_have_text("succeeded", timeout=30_000)
    shot("job")
    page.goto(f"{base}/jobs/")
    shot("jobs")
    page.goto(f"{base}/audit/")
    shot("audit")
    page.goto(f"{base}/component/")
    shot("component")
    page.goto(f"{base}/search/?q=ord-3")
    shot("search")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{base}/")
    expect(page.locator("#live-status")).to_contain_text("live", timeout=15_000)
    shot("dashboard-narrow")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.get_by_role("button", name="Log out").click()
    logged_in("viewer")
    page.goto(f"{base}/areas/InvoiceService/FAULT/")
    shot("area-browser-viewer")


def test_screenshots_of_the_reports_and_of_target_protection(
    page, console_server, logged_in, deploy, workers, worker_env, broker, redis_available
):
    """Run on its own with ``-k reports``: a report over the hand-computed history (tests/fixtures/history.py),
    and the dashboard with an open circuit breaker and a blocked ordered group."""
    import redis

    from ase_engine.ordering import OrderedGroups
    from ase_engine.protection import Protection
    from console.history_store import bulk_load
    from tests.conftest import TEST_REDIS_URL
    from tests.fixtures.history import history

    OUT.mkdir(parents=True, exist_ok=True)
    base = console_server.url
    worker_env.update(SPARK_MASTER="local[2]", ASE_REPORT_PARTITIONS="2")
    bulk_load(history())
    deploy("OrderServiceAssured", "http://127.0.0.1:9/orders", mustBeAutomaticallyStarted="false")
    unit = deploy(
        "PaymentService",
        "http://127.0.0.1:9/payments",
        mustBeAutomaticallyStarted="false",
        **{"circuit-breaker-threshold": "3", "circuit-breaker-cooldown": "30", "ordered-groups": "true"},
    ).unit.to_config()
    client = redis.Redis.from_url(TEST_REDIS_URL)
    shared, groups = Protection(client, "w1"), OrderedGroups(client)
    for _ in range(3):
        shared.record(unit, failed=True)
    groups.block(unit, "customer-42", "0f5c2a9e7d1b4c3a8e6f0a1b2c3d4e5f", "retry 1 of 3 scheduled (HTTP 503)")
    workers()

    def shot(name: str, full_page: bool = False) -> None:
        page.screenshot(path=str(OUT / f"{name}.png"), full_page=full_page)

    try:
        logged_in("operator")
        expect(page.locator('tr[data-service="PaymentService"] td.breaker')).to_contain_text("open")
        expect(page.locator('#groups-body tr[data-group="customer-42"]')).to_be_visible()
        expect(page.locator("#live-status")).to_contain_text("live", timeout=15_000)
        shot("dashboard-protection", full_page=True)
        page.goto(f"{base}/reports/")
        page.get_by_label("From (UTC)").fill("2026-01-01T10:00")
        page.get_by_label("To (UTC, excluded)").fill("2026-01-01T12:00")
        page.get_by_label("Services").fill("alpha, beta")
        page.get_by_role("button", name="Launch report").click()
        expect(page.locator("#report-stage")).to_contain_text("stage", timeout=90_000)
        shot("report-progress")
        expect(page.locator("#report-status")).to_have_text("succeeded", timeout=120_000)
        page.wait_for_timeout(300)
        shot("report", full_page=True)
        page.goto(f"{base}/reports/")
        shot("reports-list")
    finally:
        shared.reset("PaymentService")
        groups.release("PaymentService", "customer-42")
