"""What the Django side keeps: component runtime settings, service units, worker
instances and the message history. Messages themselves live only in ActiveMQ."""

from __future__ import annotations

from django.db import models

from ase_engine.config import QueueNames, RetryPolicy, ServiceUnitConfig
from ase_engine.history import EventKind


class ComponentSettings(models.Model):
    """The hot-updatable runtime parameters (SE-ASE-CFG-010); one row, pk=1.

    Empty means "use the value from the environment" (``ASE_TIME_TO_LIVE``,
    ``ASE_STOP_TIMEOUT``)."""

    time_to_live = models.PositiveIntegerField(null=True, blank=True, help_text="seconds, 0 = infinite")
    stop_timeout = models.PositiveIntegerField(null=True, blank=True, help_text="seconds")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "component settings"

    @classmethod
    def load(cls) -> ComponentSettings:
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj


class ServiceUnit(models.Model):
    """A deployed service unit: the ASE service (provides) and its target (consumes)."""

    name = models.CharField(max_length=200, unique=True)
    # provides
    service = models.CharField(max_length=200, unique=True, help_text="ASE service local name (ingress path)")
    interface = models.CharField(max_length=400, blank=True)
    endpoint = models.CharField(max_length=200, blank=True)
    provides_auto_start = models.BooleanField(default=True)
    stop_timeout = models.PositiveIntegerField(null=True, blank=True)
    # consumes
    target_service = models.CharField(max_length=400, blank=True)
    target_endpoint = models.CharField(max_length=200, blank=True)
    target_interface = models.CharField(max_length=400, blank=True)
    target_url = models.CharField(max_length=2000)
    timeout_ms = models.PositiveIntegerField(default=30_000)
    mep = models.CharField(max_length=20, default="InOnly")
    consumes_auto_start = models.BooleanField(default=True)
    is_idempotent = models.BooleanField(default=False)
    time_to_live = models.PositiveIntegerField(null=True, blank=True)
    retry_number = models.PositiveIntegerField(default=3)
    retry_base_interval = models.PositiveIntegerField(default=10)
    retry_factor = models.PositiveIntegerField(default=3)
    # target protection and ordered delivery (issue 7)
    breaker_threshold = models.PositiveIntegerField(default=0, help_text="consecutive errors/timeouts; 0 = off")
    breaker_cooldown = models.PositiveIntegerField(default=30, help_text="seconds before the half-open probe")
    rate_limit = models.FloatField(default=0.0, help_text="messages/s across every instance; 0 = unlimited")
    ordered_groups = models.BooleanField(default=False, help_text="X-ASE-Group messages reach the target in order")
    group_blocked = models.CharField(
        max_length=10,
        default="wait",
        choices=[("wait", "wait"), ("skip", "skip")],
        help_text="parked head: wait or skip",
    )
    # persistence area
    queue_pending = models.CharField(max_length=200)
    queue_expired = models.CharField(max_length=200)
    queue_timedout = models.CharField(max_length=200)
    queue_error = models.CharField(max_length=200)
    queue_fault = models.CharField(max_length=200)
    # process state, shared by every instance
    posting_started = models.BooleanField(default=False)
    sending_started = models.BooleanField(default=False)
    descriptor = models.TextField(blank=True, help_text="the JBI descriptor it was deployed from, if any")
    # Per-service ingress token (SHA-256 of it); empty: the ingress takes requests without one (the default).
    ingress_token_hash = models.CharField(max_length=64, blank=True)
    deployed_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["service"]

    def __str__(self) -> str:
        return self.service

    def to_config(self) -> ServiceUnitConfig:
        return ServiceUnitConfig(
            name=self.name,
            service=self.service,
            target_url=self.target_url,
            interface=self.interface,
            endpoint=self.endpoint,
            provides_auto_start=self.provides_auto_start,
            stop_timeout=self.stop_timeout,
            target_service=self.target_service,
            target_endpoint=self.target_endpoint,
            target_interface=self.target_interface,
            timeout_ms=self.timeout_ms,
            consumes_auto_start=self.consumes_auto_start,
            is_idempotent=self.is_idempotent,
            time_to_live=self.time_to_live,
            retry=RetryPolicy(self.retry_number, self.retry_base_interval, self.retry_factor),
            mep=self.mep,
            breaker_threshold=self.breaker_threshold,
            breaker_cooldown=self.breaker_cooldown,
            rate_limit=self.rate_limit,
            ordered_groups=self.ordered_groups,
            group_blocked=self.group_blocked,
            queues=QueueNames(
                self.queue_pending, self.queue_expired, self.queue_timedout, self.queue_error, self.queue_fault
            ),
        )

    @classmethod
    def fields_from_config(cls, config: ServiceUnitConfig) -> dict[str, object]:
        areas = config.areas
        return {
            "name": config.name,
            "service": config.service,
            "interface": config.interface,
            "endpoint": config.endpoint,
            "provides_auto_start": config.provides_auto_start,
            "stop_timeout": config.stop_timeout,
            "target_service": config.target_service,
            "target_endpoint": config.target_endpoint,
            "target_interface": config.target_interface,
            "target_url": config.target_url,
            "timeout_ms": config.timeout_ms,
            "mep": config.mep,
            "consumes_auto_start": config.consumes_auto_start,
            "is_idempotent": config.is_idempotent,
            "time_to_live": config.time_to_live,
            "retry_number": config.retry.number,
            "retry_base_interval": config.retry.base_interval,
            "retry_factor": config.retry.factor,
            "breaker_threshold": config.breaker_threshold,
            "breaker_cooldown": config.breaker_cooldown,
            "rate_limit": config.rate_limit,
            "ordered_groups": config.ordered_groups,
            "group_blocked": config.group_blocked,
            "queue_pending": areas.pending,
            "queue_expired": areas.expired,
            "queue_timedout": areas.timedout,
            "queue_error": areas.error,
            "queue_fault": areas.fault,
        }


class WorkerInstance(models.Model):
    """One component instance (a Celery worker running a sending process), with its heartbeat."""

    name = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=200, blank=True)
    pid = models.PositiveIntegerField(null=True)
    started_at = models.DateTimeField()
    last_heartbeat = models.DateTimeField()
    connection_status = models.CharField(max_length=20, default="disconnected")
    last_connection_error = models.TextField(blank=True)
    sending_services = models.JSONField(default=list, help_text="services whose sending runs here")
    in_flight = models.JSONField(default=dict)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class MessageEvent(models.Model):
    """One waypoint in the life of one message (DESIGN invariant 7)."""

    message_id = models.CharField(max_length=64, db_index=True)
    service = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=[(k.value, k.value.replace("_", " ")) for k in EventKind])
    at = models.DateTimeField()
    area = models.CharField(max_length=200, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    outcome_code = models.CharField(max_length=20, blank=True)
    target_status = models.PositiveIntegerField(null=True)
    duration_ms = models.PositiveIntegerField(null=True)
    size = models.PositiveBigIntegerField(null=True)
    detail = models.CharField(max_length=500, blank=True)
    instance = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["service", "at"]), models.Index(fields=["kind", "at"])]

    def __str__(self) -> str:
        return f"{self.message_id} {self.kind}"


class Job(models.Model):
    """A long administrative operation (purge, recycle): who asked, its progress and its result."""

    class Kind(models.TextChoices):
        PURGE = "purge"
        RECYCLE = "recycle"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    kind = models.CharField(max_length=20, choices=Kind.choices)
    service = models.CharField(max_length=200)
    subtype = models.CharField(max_length=20)
    parameters = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True)
    total = models.PositiveBigIntegerField(default=0)
    done = models.PositiveBigIntegerField(default=0)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="last sign of life of a running job")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.service}/{self.subtype} ({self.status})"


class AuditEntry(models.Model):
    """One mutating administrative call: who, when, what, with which parameters, and how it ended."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    username = models.CharField(max_length=150, blank=True, help_text="kept if the user is deleted")
    action = models.CharField(max_length=100)
    parameters = models.JSONField(default=dict, blank=True)
    result = models.TextField(blank=True)
    succeeded = models.BooleanField(default=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username} {self.action}"


class BrokerStatus(models.Model):
    """The connection status to the persistence system (SE-ASE-MON-010); one row, pk=1.

    Written after every administrative interaction with the broker and by the
    periodic probe (Celery beat) when nothing else talks to it."""

    connected = models.BooleanField(default=False)
    checked_at = models.DateTimeField(null=True)
    last_error = models.TextField(blank=True)
    source = models.CharField(max_length=100, blank=True, help_text="what last talked to the broker")

    class Meta:
        verbose_name_plural = "broker status"


class Report(models.Model):
    """One run of the Spark reports over the message history, with its parameters and its results.

    Launched by ``console.reports.start_report`` (a Celery job) or run in place by
    ``manage.py ase_report``; ``stage``/``progress`` follow the Spark job's stages."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    stage = models.CharField(max_length=200, blank=True, help_text="what the Spark job is doing now")
    progress = models.FloatField(default=0.0, help_text="0..1: Spark stages (and reports) done")
    parameters = models.JSONField(default=dict, help_text="start, end (ISO 8601, UTC), services")
    requested_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="ase_reports"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    events = models.BigIntegerField(null=True, blank=True, help_text="history events read")
    results = models.JSONField(default=dict, help_text="report name -> list of rows")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"report {self.pk} ({self.status})"
