"""The "plain Celery task" baseline of bench/delivery.py.

What a team would write without ASE: a Celery task over Redis that posts the
body to the target with urllib3 (the HTTP client ASE uses), acknowledged late
(``acks_late=True``) and retried on transport errors and 5xx (``autoretry_for``).

    celery -A bench.plain_celery worker --pool threads --concurrency 8

Broker: Redis database 13 (``BENCH_CELERY_BROKER``), queue ``bench_plain`` (not
``celery``, so a worker of the product sharing the database never sees these
tasks); no result backend. Target: ``BENCH_TARGET_URL``.
"""

from __future__ import annotations

import os

import urllib3
from celery import Celery

BROKER_URL = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/13")
TARGET_URL = os.environ.get("BENCH_TARGET_URL", "http://127.0.0.1:8654/celery")
QUEUE = "bench_plain"

app = Celery("bench_plain", broker=BROKER_URL)
app.conf.update(
    task_default_queue=QUEUE,
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)

# One pool per worker process, shared by its threads (urllib3's PoolManager is thread-safe).
_client = urllib3.PoolManager(maxsize=16, timeout=urllib3.Timeout(10.0), retries=False)


class TargetError(Exception):
    pass


@app.task(
    name="bench.deliver",
    acks_late=True,
    autoretry_for=(urllib3.exceptions.HTTPError, TargetError),
    retry_backoff=True,
    max_retries=5,
)
def deliver(message_id: str, body: str, content_type: str = "application/json") -> None:
    response = _client.request(
        "POST", TARGET_URL, body=body.encode(), headers={"Content-Type": content_type, "X-Bench-Id": message_id}
    )
    if response.status >= 400:
        raise TargetError(f"HTTP {response.status}")
