from django.contrib import admin

from console.models import ComponentSettings, MessageEvent, ServiceUnit, WorkerInstance


@admin.register(ServiceUnit)
class ServiceUnitAdmin(admin.ModelAdmin):
    list_display = ("service", "target_url", "posting_started", "sending_started", "is_idempotent", "deployed_at")
    search_fields = ("service", "name", "target_url")


@admin.register(MessageEvent)
class MessageEventAdmin(admin.ModelAdmin):
    list_display = ("at", "message_id", "service", "kind", "area", "attempt", "outcome_code", "target_status")
    list_filter = ("kind", "service")
    search_fields = ("message_id",)


@admin.register(WorkerInstance)
class WorkerInstanceAdmin(admin.ModelAdmin):
    list_display = ("name", "connection_status", "last_heartbeat", "sending_services")


admin.site.register(ComponentSettings)
