"""Console benchmark: dashboard and area browser with 1,000,000 messages in an area.

    flock /tmp/ase-bench.lock .venv/bin/python bench/console.py [--messages 1000000] [--no-doc]

The web tier runs as ``scripts/up.sh`` starts it (uvicorn, 2 workers, collected
static files). A service unit's sending process is stopped and its PENDING
queue is filled with N persistent messages (STOMP transactions of 1,000
messages). Before and after the fill, Debian's headless chromium (Playwright,
1280x800, logged in as an admin) opens the dashboard and the area browser of
that area 5 times each; each load's first contentful paint (Paint Timing API)
and server response time (Navigation Timing) are recorded. Goal (issue 5):
first paint <= 1 s with 1,000,000 messages in the area.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report  # noqa: E402
from bench.stack import WEB_PORT, BenchError, Stack, run  # noqa: E402
from tests.fixtures.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402  (the browser tests launch it the same way)

SERVICE = "BenchConsole"
QUEUE = "bench_console"
GOAL_PAINT_S = 1.0
LOADS = 5
PASSWORD = "bench-console-password"


def fill(stack: Stack, queue_name: str, count: int, batch: int = 1000, deadline_s: float = 480) -> float:
    """Queue ``count`` ASE messages, ``batch`` per STOMP transaction (one receipt per commit); returns seconds."""
    import stomp

    from ase_engine.message import Message, new_id

    headers, body = Message(
        id=new_id(), service=SERVICE, payload=b'{"order": 1, "lines": [1, 2, 3]}', content_type="application/json"
    ).to_frame()
    headers = {**headers, "persistent": "true"}
    conn = stomp.Connection12([("127.0.0.1", stack.component().hosts[0][1])], heartbeats=(0, 0))
    receipts = _Receipts()
    conn.set_listener("receipts", receipts)
    conn.connect(wait=True)
    started = time.monotonic()
    sent = 0
    try:
        while sent < count:
            if time.monotonic() - started > deadline_s:
                raise BenchError(f"fill too slow: {sent} of {count} messages in {deadline_s:g} s")
            tx = conn.begin()
            for _ in range(min(batch, count - sent)):
                conn.send(f"/queue/{queue_name}", body, headers={**headers, "ase-id": new_id()}, transaction=tx)
            receipt = uuid.uuid4().hex
            conn.commit(tx, headers={"receipt": receipt})
            receipts.wait(receipt, 60)
            sent += min(batch, count - sent)
            if sent % 100_000 == 0:
                print(f"  {sent:,} queued ({sent / (time.monotonic() - started):,.0f}/s)", flush=True)
    finally:
        conn.disconnect()
    return time.monotonic() - started


class _Receipts:
    """A STOMP listener that lets the caller wait for one receipt, with a time limit."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._condition = threading.Condition()

    def on_receipt(self, frame: Any) -> None:
        with self._condition:
            self._seen.add(frame.headers.get("receipt-id", ""))
            self._condition.notify_all()

    def on_error(self, frame: Any) -> None:
        print(f"broker error: {frame.headers} {frame.body!r}", file=sys.stderr)

    def wait(self, receipt: str, timeout: float) -> None:
        with self._condition:
            if not self._condition.wait_for(lambda: receipt in self._seen, timeout):
                raise BenchError(f"no receipt from the broker within {timeout:g} s")
            self._seen.discard(receipt)


def measure(base: str, paths: dict[str, str]) -> dict[str, list[tuple[float, float]]]:
    """Per page: (first contentful paint, server response time) in seconds for each of ``LOADS`` loads."""
    from playwright.sync_api import sync_playwright

    results: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{base}/login/")
        page.get_by_label("Login").fill("bench")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{base}/")
        for _ in range(LOADS):
            for name, path in paths.items():
                page.goto(f"{base}{path}", wait_until="load")
                page.wait_for_function(
                    "performance.getEntriesByName('first-contentful-paint').length > 0", timeout=30_000
                )
                paint, response = page.evaluate(
                    """() => [performance.getEntriesByName('first-contentful-paint')[0].startTime,
                              performance.getEntriesByType('navigation')[0].responseEnd
                              - performance.getEntriesByType('navigation')[0].requestStart]"""
                )
                results[name].append((paint / 1000, response / 1000))
        browser.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()
    n = args.messages
    info = report.machine()
    began = time.monotonic()
    with Stack("console") as stack:
        stack.start_broker()
        stack.migrate()
        stack.manage("collectstatic", "--noinput", "-v", "0")
        stack.manage("shell", "-c", _create_admin())
        target = stack.start_target()
        stack.deploy(SERVICE, QUEUE, target + "/console", sending=False)
        stack.start_web()
        base = f"http://127.0.0.1:{WEB_PORT}"
        paths = {"dashboard": "/", "area browser": f"/areas/{SERVICE}/PENDING/"}
        empty = measure(base, paths)
        fill_seconds = fill(stack, QUEUE, n)
        depth = stack.depth(QUEUE)
        if depth != n:
            raise BenchError(f"{QUEUE} holds {depth} messages, expected {n}")
        print(f"{n:,} messages queued in {fill_seconds:.0f} s")
        full = measure(base, paths)
        if stack.depth(QUEUE) != n:
            raise BenchError("a page load changed the area")

    rows = []
    for name in paths:
        for label, runs in ((f"{name}, empty area", empty[name]), (f"{name}, {n:,} messages", full[name])):
            paints = [p for p, _ in runs]
            responses = [r for _, r in runs]
            ok = max(paints) <= GOAL_PAINT_S
            rows.append(
                [
                    label,
                    f"{statistics.median(paints) * 1000:.0f} ms",
                    f"{max(paints) * 1000:.0f} ms",
                    f"{statistics.median(responses) * 1000:.0f} ms",
                    "" if "empty" in label else ("met" if ok else "NOT met"),
                ]
            )
    table = report.table(
        ["page (5 loads each)", "first paint, median", "first paint, max", "server response, median", "goal <= 1 s"],
        rows,
    )
    print(table)
    section = f"""## Console: first paint with {n:,} messages in an area

Command: `{report.command_line()}` (total run time {time.monotonic() - began:.0f} s)

Machine and date:
{report.machine_markdown(info)}

What is measured: the web tier as `scripts/up.sh` starts it (uvicorn, 2 workers). A unit's sending process is
stopped and its PENDING queue receives {n:,} persistent messages (STOMP transactions of 1,000; {n / fill_seconds:,.0f}
messages/s). Before and after, headless chromium (1280x800, logged in) loads the dashboard and the area browser of
that area {LOADS} times each; first contentful paint from the Paint Timing API, server response time from
Navigation Timing (request start to response end). Depths come from the broker's statistics plugin and the browser
reads only the head of the queue, so the page costs the same whatever the depth.

{table}
"""
    if not args.no_doc:
        print(f"written to {report.update_section('console', section)}")
    return 0 if all(r[-1] != "NOT met" for r in rows) else 1


def _create_admin() -> str:
    return (
        "from django.contrib.auth.models import User; "
        f"User.objects.filter(username='bench').exists() or User.objects.create_superuser('bench', '', '{PASSWORD}')"
    )


if __name__ == "__main__":
    run(main)
