"""Celery tasks: thin calls into one function each."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(ignore_result=True, expires=5)
def pump_retries() -> dict[str, Any]:
    """Beat, every ASE_RETRY_PUMP_INTERVAL seconds: move due requests from RETRY back to PENDING."""
    from console.retries import run_pump

    return run_pump()
