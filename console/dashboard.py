"""What the dashboard shows, as one JSON-ready snapshot.

Every service unit with its posting/sending state on each live worker
instance, the depth of each of its areas, the accepted/delivered/failed
counts per minute over the last half hour, the broker's connection
status, each unit's circuit breaker and the ordered groups that wait (and
for which message). Depths come from ActiveMQ's statistics plugin (one small reply per
queue): no queue is ever browsed, so a million messages in an area cost
the same as one. The console page renders it, and the live publisher
(``console.live``) pushes a fresh one to every open dashboard.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.utils import timezone

from ase_engine.broker import StompConnection
from ase_engine.errors import BrokerUnavailable
from console.component import component_config
from console.models import MessageEvent, ServiceUnit, WorkerInstance
from console.monitoring import note
from console.operations import live_instances
from console.protection import protection_status

log = logging.getLogger("ase.console.dashboard")

RATE_WINDOW_MINUTES = 30
# The chart's series and the history events each one counts.
SERIES = {
    "accepted": ("posted",),
    "delivered": ("acked",),
    "failed": ("fault", "error", "timeout", "expired"),
}
# An instance silent for longer than this is no longer listed (a "lost" one is shown until then).
LOST_INSTANCE_HORIZON = timedelta(hours=1)
SUBTYPES = ("PENDING", "RETRY", "EXPIRED", "TIMEDOUT", "ERROR", "FAULT")


class _StatsConnection:
    """One STOMP connection per process for queue statistics, opened on demand, reopened after a failure."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: StompConnection | None = None

    def depths(self, names: list[str]) -> dict[str, int | None]:
        with self._lock:
            try:
                stats = self._connected().queue_stats(names, timeout=2.0)
            except BrokerUnavailable:
                # The connection may have been dropped since the last call: one fresh attempt.
                self._close()
                stats = self._connected().queue_stats(names, timeout=2.0)
        return {name: None if s is None else int(s.get("size", 0)) for name, s in stats.items()}

    def _connected(self) -> StompConnection:
        if self._conn is None or not self._conn.connected:
            self._close()
            component = component_config()
            conn = StompConnection(component, name="console-stats")
            conn.connect(timeout=component.receipt_timeout)
            self._conn = conn
        return self._conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.disconnect()
            except BrokerUnavailable:
                pass


_stats = _StatsConnection()


def area_queues(unit: ServiceUnit) -> dict[str, list[str]]:
    """The queues behind each sub-type of a unit's persistence area (RETRY is one queue per attempt)."""
    config = unit.to_config()
    return {
        "PENDING": [unit.queue_pending],
        "RETRY": list(config.retry_queues()),
        "EXPIRED": [unit.queue_expired],
        "TIMEDOUT": [unit.queue_timedout],
        "ERROR": [unit.queue_error],
        "FAULT": [unit.queue_fault],
    }


def area_depths(units: list[ServiceUnit]) -> tuple[dict[str, dict[str, int | None]], dict[str, Any]]:
    """Depth of every area of every unit, and the broker status as the console process sees it."""
    layout = {unit.service: area_queues(unit) for unit in units}
    names = sorted({name for areas in layout.values() for queues in areas.values() for name in queues})
    try:
        depths = _stats.depths(names) if names else {}
        broker = {"status": "connected", "error": ""}
    except BrokerUnavailable as exc:
        log.warning("broker statistics unavailable: %s", exc)
        depths, broker = {}, {"status": "unreachable", "error": str(exc)}
    if names:
        note(broker["status"] == "connected", "dashboard", broker["error"])
    up = broker["status"] == "connected"
    result: dict[str, dict[str, int | None]] = {}
    for service, areas in layout.items():
        # A queue the broker has not created yet (never held a message) counts as empty.
        result[service] = {
            subtype: sum(depths.get(q) or 0 for q in queues) if up else None for subtype, queues in areas.items()
        }
    return result, broker


def rates(now: datetime | None = None, minutes: int = RATE_WINDOW_MINUTES) -> dict[str, Any]:
    """Accepted/delivered/failed events per minute over the last ``minutes`` minutes (oldest first)."""
    now = now or timezone.now()
    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=minutes - 1)
    kinds = [k for ks in SERIES.values() for k in ks]
    rows = (
        MessageEvent.objects.filter(at__gte=start, kind__in=kinds)
        .annotate(minute=TruncMinute("at"))
        .values("minute", "kind")
        .annotate(n=Count("id"))
    )
    buckets = [start + timedelta(minutes=i) for i in range(minutes)]
    index = {b: i for i, b in enumerate(buckets)}
    series = {name: [0] * minutes for name in SERIES}
    of_kind = {k: name for name, ks in SERIES.items() for k in ks}
    for row in rows:
        i = index.get(row["minute"])
        if i is not None:
            series[of_kind[row["kind"]]][i] += row["n"]
    return {
        "minutes": [b.isoformat() for b in buckets],
        **series,
        "totals": {name: sum(values) for name, values in series.items()},
    }


def instances_view() -> list[dict[str, Any]]:
    alive = {w.name for w in live_instances()}
    return [
        {
            "name": w.name,
            "alive": w.name in alive,
            "connection_status": w.connection_status if w.name in alive else "lost",
            "last_heartbeat": w.last_heartbeat.isoformat(),
            "sending_services": list(w.sending_services),
            "in_flight": sum(int(n) for n in (w.in_flight or {}).values()),
        }
        for w in WorkerInstance.objects.exclude(connection_status="stopped")
        .filter(last_heartbeat__gte=timezone.now() - LOST_INSTANCE_HORIZON)
        .order_by("name")
    ]


def snapshot() -> dict[str, Any]:
    units = list(ServiceUnit.objects.order_by("service"))
    depths, broker = area_depths(units)
    instances = instances_view()
    live = [i for i in instances if i["alive"]]
    protection = protection_status()
    breakers = {b["service"]: b for b in protection["breakers"]}
    return {
        "at": timezone.now().isoformat(),
        "broker": broker,
        "instances": instances,
        "units": [
            {
                "service": u.service,
                "posting_started": u.posting_started,
                "sending_started": u.sending_started,
                "is_idempotent": u.is_idempotent,
                # What each live instance actually runs (it converges on the shared state within a sync).
                "sending_on": {i["name"]: u.service in i["sending_services"] for i in live},
                "areas": depths.get(u.service, {}),
                # The circuit breaker shared by every instance (None: the unit has none).
                "breaker": breakers.get(u.service),
            }
            for u in units
        ],
        "blocked_groups": protection["blocked_groups"],
        "protection_error": protection["error"],
        "rates": rates(),
    }
