"""Running the retry pump from Celery beat (PROC-026): one pump at a time across all workers.

Beat sends ``console.tasks.pump_retries`` every ``ASE_RETRY_PUMP_INTERVAL``
seconds. Whichever worker runs it takes a Redis lock, so two runs never move
the same requests; a run whose worker dies releases the lock when it expires
(``ASE_RETRY_PUMP_BUDGET`` + 5 s) and the requests it had not committed stay
in their RETRY queues.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import redis
from django.conf import settings

from ase_engine.errors import BrokerUnavailable
from ase_engine.retry import RetryPump
from console.component import component_config
from console.history import recorder
from console.models import ServiceUnit

log = logging.getLogger("ase.retry")

LOCK_NAME = "ase:retry-pump"


def run_pump(budget: float | None = None) -> dict[str, Any]:
    budget = settings.ASE_RETRY_PUMP_BUDGET if budget is None else budget
    client = redis.Redis.from_url(settings.REDIS_URL)
    lock = client.lock(LOCK_NAME, timeout=budget + 5, blocking=False)
    if not lock.acquire():
        return {"skipped": "another pump is running"}
    try:
        units = [u.to_config() for u in ServiceUnit.objects.filter(is_idempotent=True, retry_number__gt=0)]
        if not units:
            return {"retried": 0, "expired": 0}
        pump = RetryPump(component_config(), recorder(), instance=f"retry-pump-{os.getpid()}")
        try:
            report = pump.pump(units, budget=budget)
        except BrokerUnavailable as exc:
            log.warning("retry pump: broker unavailable (%s); due requests wait for the next run", exc)
            return {"error": str(exc)}
        return {"retried": report.retried, "expired": report.expired, "seconds": round(report.seconds, 3)}
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            pass  # expired while we ran: another pump may already hold it
