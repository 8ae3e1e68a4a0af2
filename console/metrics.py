"""``GET /metrics``: Prometheus text format (MON-000).

Gathered at scrape time, nothing kept in this process (there are several web
and worker processes): area depths from the broker's statistics, message
counts by waypoint and latency histograms from the message history. If
``ASE_METRICS_TOKEN`` is set, a scrape must send ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count, Q, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ase_engine.errors import BrokerUnavailable
from ase_engine.history import EventKind

log = logging.getLogger("ase.metrics")

# Seconds; the target's answer time of each attempt.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_COUNTED = {
    "accepted": EventKind.POSTED,
    "delivered": EventKind.ACKED,
    "faults": EventKind.FAULT,
    "errors": EventKind.ERROR,
    "timeouts": EventKind.TIMEOUT,
    "retries": EventKind.RETRY_SCHEDULED,
    "expired": EventKind.EXPIRED,
    "purged": EventKind.PURGED,
    "recycled": EventKind.RECYCLED,
}


class AseCollector:
    def collect(self) -> Iterator[Metric]:
        from console.areas import list_areas
        from console.models import MessageEvent
        from console.monitoring import connection_status

        up = GaugeMetricFamily("ase_broker_connected", "1 if the last interaction with the broker succeeded")
        depth = GaugeMetricFamily("ase_area_depth", "Messages in a persistence area", labels=["service", "subtype"])
        try:
            for row in list_areas():
                depth.add_metric([row["service"], row["subtype"]], row["depth"])
        except BrokerUnavailable as exc:
            log.warning("metrics: area depths unavailable: %s", exc)
        up.add_metric([], 1.0 if connection_status()["status"] == "connected" else 0.0)
        yield up
        yield depth

        # Counters are totals over the stored history (it is the source of truth for every process).
        counts = GaugeMetricFamily(
            "ase_messages", "Messages that passed a waypoint, from the history", labels=["service", "event"]
        )
        names = {kind.value: name for name, kind in _COUNTED.items()}
        rows = MessageEvent.objects.filter(kind__in=list(names)).values("service", "kind").annotate(n=Count("id"))
        for row in rows:
            counts.add_metric([row["service"], names[row["kind"]]], row["n"])
        yield counts

        latency = HistogramMetricFamily(
            "ase_target_latency_seconds", "Answer time of the target per attempt", labels=["service"]
        )
        attempts = MessageEvent.objects.filter(
            kind__in=[EventKind.ACKED.value, EventKind.FAULT.value, EventKind.ERROR.value, EventKind.TIMEOUT.value],
            duration_ms__isnull=False,
        )
        aggregates = {
            f"le_{i}": Count("id", filter=Q(duration_ms__lte=b * 1000)) for i, b in enumerate(LATENCY_BUCKETS)
        }
        for row in attempts.values("service").annotate(total=Count("id"), sum_ms=Sum("duration_ms"), **aggregates):
            buckets = [(str(b), row[f"le_{i}"]) for i, b in enumerate(LATENCY_BUCKETS)]
            buckets.append(("+Inf", row["total"]))
            latency.add_metric([row["service"]], buckets, sum_value=(row["sum_ms"] or 0) / 1000)
        yield latency


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.ASE_METRICS_TOKEN
    if token and not hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {token}"):
        return HttpResponse("authentication required\n", status=401, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AseCollector())  # type: ignore[arg-type]
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
