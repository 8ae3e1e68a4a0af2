"""Connection status to the broker (SE-ASE-MON-010) and the component's status as one document."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from django.utils import timezone

from ase_engine.broker import StompConnection
from ase_engine.errors import BrokerUnavailable
from console.component import component_config
from console.models import BrokerStatus, ServiceUnit

log = logging.getLogger("ase.monitoring")

T = TypeVar("T")


def note(connected: bool, source: str, error: str = "") -> None:
    """Remember the outcome of one interaction with the broker."""
    BrokerStatus.objects.update_or_create(
        pk=1,
        defaults={"connected": connected, "checked_at": timezone.now(), "last_error": error, "source": source},
    )


def tracked(source: str, call: Callable[[], T]) -> T:
    """Run ``call`` (which talks to the broker) and record whether the broker answered."""
    try:
        result = call()
    except BrokerUnavailable as exc:
        note(False, source, str(exc))
        raise
    note(True, source)
    return result


def probe() -> dict[str, Any]:
    """Open and close a connection to the broker; Celery beat runs it when nothing else talks to it."""
    component = component_config()
    connection = StompConnection(component, name=f"probe-{uuid.uuid4().hex[:8]}", heartbeats=(0, 0))
    try:
        connection.connect(timeout=component.receipt_timeout)
        connection.disconnect()
    except BrokerUnavailable as exc:
        note(False, "probe", str(exc))
        log.warning("broker probe: not connected: %s", exc)
        return {"connected": False, "error": str(exc)}
    note(True, "probe")
    return {"connected": True}


def connection_status() -> dict[str, Any]:
    row = BrokerStatus.objects.filter(pk=1).first()
    if row is None:
        return {"status": "unknown", "checked_at": None, "last_error": "", "source": ""}
    return {
        "status": "connected" if row.connected else "disconnected",
        "checked_at": row.checked_at,
        "last_error": row.last_error,
        "source": row.source,
    }


def status() -> dict[str, Any]:
    """What ``GET /api/component/status/`` shows: broker connection, instances and their processes, depths."""
    from console.areas import list_areas
    from console.models import WorkerInstance
    from console.operations import live_instances

    live = {w.name for w in live_instances()}
    instances = [
        {
            "name": w.name,
            "hostname": w.hostname,
            "pid": w.pid,
            "alive": w.name in live,
            "started_at": w.started_at,
            "last_heartbeat": w.last_heartbeat,
            "connection_status": w.connection_status,
            "last_connection_error": w.last_connection_error,
            "sending_services": w.sending_services,
            "in_flight": w.in_flight,
        }
        for w in WorkerInstance.objects.all()
    ]
    units = [
        {"service": u.service, "posting": u.posting_started, "sending": u.sending_started}
        for u in ServiceUnit.objects.all()
    ]
    try:
        areas = list_areas()
    except BrokerUnavailable:
        areas = []
    from console.protection import protection_status

    return {
        "connection": connection_status(),
        "instances": instances,
        "services": units,
        "areas": areas,
        "protection": protection_status(),
    }
