"""Request and response shapes of the admin API (they also make the OpenAPI schema)."""

from __future__ import annotations

from django.contrib.auth.models import User
from rest_framework import serializers

from console.models import AuditEntry, Job, ServiceUnit
from console.roles import Role, role_of


class ErrorSerializer(serializers.Serializer):
    error = serializers.CharField(help_text="ERROR SE-ASE-Exxxx: <message>, or a plain sentence")


class WarningSerializer(serializers.Serializer):
    warning = serializers.CharField(help_text="WARNING SE-ASE-Wxxxx: <message>")


class ServiceUnitSerializer(serializers.ModelSerializer):
    ingress_token_required = serializers.SerializerMethodField()

    class Meta:
        model = ServiceUnit
        exclude = ["id", "descriptor", "ingress_token_hash"]

    def get_ingress_token_required(self, unit: ServiceUnit) -> bool:
        return bool(unit.ingress_token_hash)


class IngressTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="shown once: send it as 'Authorization: Bearer <token>' to the ingress")


class UnitParametersSerializer(serializers.Serializer):
    """A unit's parameters by their descriptor names (DESIGN.md): the two sections of a jbi.xml."""

    name = serializers.CharField(required=False, help_text="service-unit name; default: the service name")
    provides = serializers.DictField(
        child=serializers.CharField(allow_blank=True), help_text="service-name, interface-name, stop-timeout, ..."
    )
    consumes = serializers.DictField(
        child=serializers.CharField(allow_blank=True), help_text="target-url, timeout, is-idempotent, ..."
    )


class UnitPatchSerializer(serializers.Serializer):
    provides = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)
    consumes = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False)


class DeployResultSerializer(serializers.Serializer):
    unit = ServiceUnitSerializer()
    created = serializers.BooleanField()
    warnings = serializers.ListField(child=serializers.CharField())


class DescriptorUploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="jbi.xml or a service-unit zip (META-INF/jbi.xml)")


class ProcessResultSerializer(serializers.Serializer):
    process = serializers.CharField()
    action = serializers.CharField()
    services = serializers.ListField(child=serializers.CharField())
    workers = serializers.ListField(child=serializers.DictField())


class AreaQueueSerializer(serializers.Serializer):
    name = serializers.CharField()
    depth = serializers.IntegerField(allow_null=True, help_text="null: the broker has no such queue")


class AreaSerializer(serializers.Serializer):
    service = serializers.CharField()
    subtype = serializers.CharField()
    queues = AreaQueueSerializer(many=True)
    depth = serializers.IntegerField()
    exists = serializers.BooleanField()


class MessageRowSerializer(serializers.Serializer):
    id = serializers.CharField()
    queue = serializers.CharField()
    subtype = serializers.CharField(allow_null=True)
    malformed = serializers.BooleanField()
    posted_at = serializers.DateTimeField(required=False, allow_null=True)
    attempts = serializers.IntegerField(required=False)
    last_outcome = serializers.CharField(required=False, allow_null=True)
    last_status = serializers.IntegerField(required=False, allow_null=True)
    last_error = serializers.CharField(required=False, allow_null=True)
    due_at = serializers.DateTimeField(required=False, allow_null=True)
    size = serializers.IntegerField()
    content_type = serializers.CharField(required=False)
    properties = serializers.DictField(child=serializers.CharField(), required=False)


class BrowsePageSerializer(serializers.Serializer):
    service = serializers.CharField()
    subtype = serializers.CharField()
    depth = serializers.IntegerField(help_text="messages in the area")
    browsable = serializers.IntegerField(help_text="messages a page can reach (each queue's head)")
    offset = serializers.IntegerField()
    limit = serializers.IntegerField()
    next_offset = serializers.IntegerField(allow_null=True)
    messages = MessageRowSerializer(many=True)


class HistoryEventSerializer(serializers.Serializer):
    kind = serializers.CharField()
    at = serializers.DateTimeField()
    area = serializers.CharField()
    attempt = serializers.IntegerField()
    outcome_code = serializers.CharField()
    target_status = serializers.IntegerField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    detail = serializers.CharField()
    instance = serializers.CharField()


class LocationSerializer(serializers.Serializer):
    queue = serializers.CharField()
    subtype = serializers.CharField(allow_null=True)


class MessageDetailSerializer(MessageRowSerializer):
    service = serializers.CharField(allow_null=True)
    queue = serializers.CharField(required=False)
    subtype = serializers.CharField(required=False, allow_null=True)
    malformed = serializers.BooleanField(required=False)
    size = serializers.IntegerField(required=False)
    location = LocationSerializer(allow_null=True, help_text="null: not in the browsable head of any area")
    payload = serializers.CharField(required=False)
    payload_encoding = serializers.ChoiceField(choices=["utf-8", "base64"], required=False)
    attachments = serializers.ListField(child=serializers.DictField(), required=False)
    mep = serializers.CharField(required=False)
    last_answer = serializers.CharField(required=False, allow_null=True)
    idempotency_key = serializers.CharField(required=False, allow_null=True)
    history = HistoryEventSerializer(many=True)


class AreaActionSerializer(serializers.Serializer):
    """Which messages: ``ids``, or a filter, or (nothing given) all of them."""

    ids = serializers.ListField(child=serializers.CharField(max_length=64), required=False, max_length=10_000)
    posted_before = serializers.DateTimeField(required=False, help_text="only messages posted before this time")
    error_contains = serializers.CharField(required=False, max_length=500, help_text="last error contains (any case)")
    force = serializers.BooleanField(required=False, default=False, help_text="recycle: non-idempotent target too")


class JobSerializer(serializers.ModelSerializer):
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "kind",
            "service",
            "subtype",
            "parameters",
            "status",
            "total",
            "done",
            "progress",
            "result",
            "error",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
        ]

    def get_progress(self, job: Job) -> float:
        """Done / total, 0..1 (1 when finished)."""
        if job.status in (Job.Status.SUCCEEDED, Job.Status.FAILED):
            return 1.0
        return round(job.done / job.total, 4) if job.total else 0.0


class ComponentSerializer(serializers.Serializer):
    time_to_live = serializers.IntegerField(min_value=0, max_value=2**31 - 1, allow_null=True)
    stop_timeout = serializers.IntegerField(min_value=0, max_value=2**31 - 1, allow_null=True)
    broker_transport = serializers.CharField(read_only=True)
    broker_url = serializers.CharField(read_only=True)
    broker_vhost = serializers.CharField(read_only=True)
    receipt_timeout = serializers.FloatField(read_only=True)


class ComponentPatchSerializer(serializers.Serializer):
    time_to_live = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, allow_null=True, required=False, help_text="seconds, 0 = infinite"
    )
    stop_timeout = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, allow_null=True, required=False, help_text="seconds"
    )
    broker_transport = serializers.CharField(required=False, help_text="refused while running (CFG-005)")
    broker_url = serializers.CharField(required=False, help_text="refused while running (CFG-005)")
    broker_vhost = serializers.CharField(required=False, help_text="refused while running (CFG-005)")


class ConnectionSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["connected", "disconnected", "unknown"])
    checked_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    source = serializers.CharField(allow_blank=True)


class InstanceSerializer(serializers.Serializer):
    name = serializers.CharField()
    hostname = serializers.CharField()
    pid = serializers.IntegerField(allow_null=True)
    alive = serializers.BooleanField()
    started_at = serializers.DateTimeField()
    last_heartbeat = serializers.DateTimeField()
    connection_status = serializers.CharField()
    last_connection_error = serializers.CharField(allow_blank=True)
    sending_services = serializers.ListField(child=serializers.CharField())
    in_flight = serializers.DictField(child=serializers.IntegerField())


class UnitStateSerializer(serializers.Serializer):
    service = serializers.CharField()
    posting = serializers.BooleanField()
    sending = serializers.BooleanField()


class BreakerSerializer(serializers.Serializer):
    """One protected unit's circuit breaker as every worker shares it (issue 7; SE-ASE-W1001 when it opens)."""

    service = serializers.CharField()
    state = serializers.ChoiceField(choices=["closed", "open", "half_open"])
    consecutive_failures = serializers.IntegerField()
    since = serializers.DateTimeField(allow_null=True, help_text="when it opened (null while closed)")
    opened_at_ms = serializers.IntegerField(allow_null=True)
    half_open_after_ms = serializers.IntegerField(allow_null=True, help_text="when the next probe may go")
    probe_instance = serializers.CharField(allow_null=True, help_text="the instance holding the half-open probe")
    opens = serializers.IntegerField(help_text="transitions to open")
    closes = serializers.IntegerField(help_text="transitions back to closed")
    probes = serializers.IntegerField(help_text="half-open probes sent")
    errors = serializers.IntegerField(help_text="errors and timeouts counted")
    threshold = serializers.IntegerField()
    cooldown = serializers.IntegerField(help_text="seconds open before a probe")
    rate_limit = serializers.FloatField(help_text="messages/s across every instance, 0: unlimited")


class BlockedGroupSerializer(serializers.Serializer):
    """An ordered group waiting for its head (SE-ASE-W1002)."""

    service = serializers.CharField()
    group = serializers.CharField()
    phase = serializers.ChoiceField(choices=["blocked", "draining"])
    blocked_by = serializers.CharField(help_text="id of the message the group waits for")
    since = serializers.DateTimeField(allow_null=True)
    since_ms = serializers.IntegerField()
    reason = serializers.CharField(allow_blank=True)
    hold_queue = serializers.CharField(allow_blank=True)


class ProtectionSerializer(serializers.Serializer):
    breakers = BreakerSerializer(many=True)
    blocked_groups = BlockedGroupSerializer(many=True)
    error = serializers.CharField(allow_blank=True, help_text="why the shared state is not shown (Redis down)")


class StatusSerializer(serializers.Serializer):
    connection = ConnectionSerializer()
    instances = InstanceSerializer(many=True)
    services = UnitStateSerializer(many=True)
    areas = AreaSerializer(many=True)
    protection = ProtectionSerializer()


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = ["id", "at", "username", "action", "parameters", "result", "succeeded"]


class UserSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = User
        fields = ["username", "is_active", "role"]

    def get_role(self, user: User) -> str | None:
        role = role_of(user)
        return role.label if role is not None else None


class UserCreateSerializer(serializers.Serializer):
    username = serializers.RegexField(r"^[\w.@+-]{1,150}$")
    password = serializers.CharField(min_length=8, max_length=128, write_only=True)
    role = serializers.ChoiceField(choices=[r.label for r in Role])


class UserPatchSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=[r.label for r in Role], required=False)
    is_active = serializers.BooleanField(required=False)
    password = serializers.CharField(min_length=8, max_length=128, write_only=True, required=False)
