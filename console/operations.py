"""Operations on service units and their processes: one function each.

The management command, the REST API and the console all call these. Each
changes the shared state in the database, then tells every worker instance
(Celery remote control) once the transaction has committed; workers also
re-read the state every ``ASE_WORKER_SYNC_INTERVAL`` seconds, so an instance
that missed the broadcast, or started later, converges anyway.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ase_engine import codes
from ase_engine.broker import StompConnection
from ase_engine.config import ComponentConfig, Notice, ParameterError, ServiceUnitConfig, parse_service_unit
from ase_engine.descriptor import deploy_plan
from ase_engine.errors import BrokerUnavailable, DeploymentError, ProcessStateError
from console.component import component_config
from console.models import ComponentSettings, ServiceUnit, WorkerInstance

log = logging.getLogger("ase.operations")


class UnknownService(LookupError):
    def __init__(self, service: str) -> None:
        super().__init__(f"No service unit provides the ASE service '{service}'.")
        self.service = service


@dataclass
class DeployResult:
    unit: ServiceUnit
    notices: list[Notice]
    created: bool


@dataclass
class ProcessResult:
    services: list[str]
    workers: list[dict[str, Any]] = field(default_factory=list)


# -- deployment --------------------------------------------------------------------


def deploy_descriptor(data: bytes, filename: str | None = None) -> DeployResult:
    """Deploy from a JBI ``jbi.xml`` or a service-unit zip (SE-ASE-PROC-000)."""
    config, notices = deploy_plan(data, filename, component_config())
    text = data.decode("utf-8", "replace") if not data.startswith(b"PK") else ""
    return deploy(config, notices, descriptor=text)


def deploy_parameters(su_name: str, provides: dict[str, Any], consumes: dict[str, Any]) -> DeployResult:
    """Deploy from plain parameters, with the same rules as a descriptor."""
    config, notices = parse_service_unit(su_name, provides, consumes, component_config())
    return deploy(config, notices)


def deploy(config: ServiceUnitConfig, notices: list[Notice], descriptor: str = "") -> DeployResult:
    """Create the persistence area's queues, then record the unit and start it as configured (PROC-005)."""
    unit_log = logging.getLogger(f"ase.deploy.{config.service}")
    create_queues(config.areas.all() + config.retry_queues())
    for notice in notices:
        codes.log(unit_log, notice.code, **notice.params)
    unit_log.info(
        "mustBeAutomaticallyStarted: provides=%s consumes=%s", config.provides_auto_start, config.consumes_auto_start
    )
    fields = ServiceUnit.fields_from_config(config)
    fields.update(
        posting_started=config.provides_auto_start,
        sending_started=config.consumes_auto_start,
        descriptor=descriptor,
    )
    with transaction.atomic():
        existing = ServiceUnit.objects.select_for_update().filter(service=config.service).first()
        if existing is None:
            unit = ServiceUnit.objects.create(**fields)
            created = True
        else:
            for name, value in fields.items():
                setattr(existing, name, value)
            existing.save()
            unit, created = existing, False
        transaction.on_commit(notify_workers)
    if config.provides_auto_start:
        codes.log(logging.getLogger(f"ase.posting.{config.service}"), "SE-ASE-I0001")
    return DeployResult(unit, notices, created)


def create_queues(names: Iterable[str]) -> None:
    """Create queues explicitly and idempotently; E0001 if the broker refuses or is down."""
    names = list(names)
    component = component_config()
    connection = StompConnection(component, name="deploy")
    try:
        connection.connect(timeout=component.receipt_timeout)
        connection.ensure_queues(names)
    except BrokerUnavailable as exc:
        area = names[0] if names else ""
        codes.log(log, "SE-ASE-E0001", area=area, error=str(exc))
        raise DeploymentError("SE-ASE-E0001", area=area, error=str(exc)) from None
    finally:
        try:
            connection.disconnect()
        except BrokerUnavailable as exc:
            codes.log(log, "SE-ASE-W0008", reason=str(exc))


def undeploy(service: str) -> ProcessResult:
    """Stop the unit's processes and forget it. Its queues are kept (PROC-055)."""
    result = stop_unit(service)
    ServiceUnit.objects.filter(service=service).delete()
    log.info("service unit '%s' undeployed; its queues are kept in the broker", service)
    return result


# -- processes ---------------------------------------------------------------------

_STATE = {
    ("posting", True): ("posting_started", "SE-ASE-W0018", "SE-ASE-I0001"),
    ("posting", False): ("posting_started", "SE-ASE-W0019", "SE-ASE-I0003"),
    ("sending", True): ("sending_started", "SE-ASE-W0021", None),
    ("sending", False): ("sending_started", "SE-ASE-W0020", None),
}


def set_process(process: str, start: bool, service: str | None = None) -> ProcessResult:
    """Start or stop the posting or the sending process, of one unit or of all (ADM-020..035).

    Raises ``ProcessStateError`` (W0018-W0021) when every selected unit is
    already in that state, ``UnknownService`` for an unknown ``service``.
    The sending process is started and stopped by the workers, which log
    I0002/I0004; a stop waits for their in-flight calls (up to stop-timeout).
    """
    field_name, already_code, done_code = _STATE[(process, start)]
    with transaction.atomic():
        units = ServiceUnit.objects.select_for_update()
        if service is not None:
            units = units.filter(service=service)
            if not units.exists():
                raise UnknownService(service)
        selected = list(units)
        to_change = [u for u in selected if getattr(u, field_name) != start]
        if not to_change:
            codes.log(log, already_code)
            raise ProcessStateError(already_code)
        ServiceUnit.objects.filter(pk__in=[u.pk for u in to_change]).update(**{field_name: start})
    if done_code:
        for unit in to_change:
            codes.log(logging.getLogger(f"ase.{process}.{unit.service}"), done_code)
    workers = notify_workers(wait=process == "sending" and not start, services=[u.service for u in to_change])
    return ProcessResult([u.service for u in to_change], workers)


def stop_unit(service: str) -> ProcessResult:
    """Stop a service unit (PROC-050): posting, then sending, waiting for in-flight calls."""
    with transaction.atomic():
        unit = ServiceUnit.objects.select_for_update().filter(service=service).first()
        if unit is None:
            raise UnknownService(service)
        if unit.posting_started:
            codes.log(logging.getLogger(f"ase.posting.{service}"), "SE-ASE-I0003")
        ServiceUnit.objects.filter(pk=unit.pk).update(posting_started=False, sending_started=False)
    return ProcessResult([service], notify_workers(wait=True, services=[service]))


def start_unit(service: str) -> ProcessResult:
    """Start a service unit's processes as its descriptor says (PROC-005)."""
    with transaction.atomic():
        unit = ServiceUnit.objects.select_for_update().filter(service=service).first()
        if unit is None:
            raise UnknownService(service)
        ServiceUnit.objects.filter(pk=unit.pk).update(
            posting_started=unit.provides_auto_start, sending_started=unit.consumes_auto_start
        )
    if unit.provides_auto_start:
        codes.log(logging.getLogger(f"ase.posting.{service}"), "SE-ASE-I0001")
    return ProcessResult([service], notify_workers())


def live_instances() -> list[WorkerInstance]:
    """Worker instances whose heartbeat is recent (three sync intervals) and that did not stop."""
    horizon = timezone.now() - timedelta(seconds=max(3 * settings.ASE_WORKER_SYNC_INTERVAL, 5.0))
    return list(WorkerInstance.objects.filter(last_heartbeat__gte=horizon).exclude(connection_status="stopped"))


def notify_workers(wait: bool = False, services: list[str] | None = None) -> list[dict[str, Any]]:
    """Ask every worker instance to apply the shared state now.

    With ``wait``, collect the replies: each worker answers once the stopped
    units' in-flight invocations have finished or their stop-timeout passed.
    Without a Redis to broadcast on, workers still converge on their next
    periodic sync; the failure is logged, not raised.
    """
    from console.celery import app

    timeout = 2.0
    if wait:
        component = component_config()
        stop_timeouts = [
            u.to_config().effective_stop_timeout(component)
            for u in ServiceUnit.objects.filter(service__in=services or [])
        ]
        timeout = max(stop_timeouts or [component.stop_timeout]) + 5.0
    # Celery waits for ``limit`` replies, or the whole timeout: expect one per live instance.
    limit = len(live_instances())
    wait = wait and limit > 0
    try:
        replies = app.control.broadcast(
            "ase_sync", arguments={"wait": wait}, reply=wait, timeout=timeout, limit=limit if wait else None
        )
    except Exception as exc:  # noqa: BLE001 - workers converge by polling anyway
        log.warning(
            "could not broadcast to the worker instances (%s: %s); they apply it on their next sync",
            type(exc).__name__,
            exc,
        )
        return []
    return [dict(reply) for reply in replies or []]


# -- service-unit parameters and component configuration --------------------------


def unit_parameters(unit: ServiceUnit) -> tuple[dict[str, str], dict[str, str]]:
    """A deployed unit's parameters by their descriptor names: (provides, consumes)."""

    def text(value: object) -> str:
        if value is None:
            return ""
        return str(value).lower() if isinstance(value, bool) else str(value)

    provides = {
        "service-name": unit.service,
        "interface-name": "" if unit.target_interface else unit.interface,
        "endpoint-name": unit.endpoint,
        "mustBeAutomaticallyStarted": text(unit.provides_auto_start),
        "stop-timeout": text(unit.stop_timeout),
        "persistence-area-name": unit.queue_pending,
        "persistence-area-name-expired": unit.queue_expired,
        "persistence-area-name-timedout": unit.queue_timedout,
        "persistence-area-name-error": unit.queue_error,
        "persistence-area-name-fault": unit.queue_fault,
    }
    consumes = {
        "service-name": unit.target_service,
        "interface-name": unit.target_interface,
        "endpoint-name": unit.target_endpoint,
        "target-url": unit.target_url,
        "timeout": text(unit.timeout_ms),
        "mep": unit.mep,
        "mustBeAutomaticallyStarted": text(unit.consumes_auto_start),
        "is-idempotent": text(unit.is_idempotent),
        "time-to-live": text(unit.time_to_live),
        "retry-policy-number": text(unit.retry_number),
        "retry-policy-base-interval": text(unit.retry_base_interval),
        "retry-policy-factor": text(unit.retry_factor),
    }
    return provides, consumes


def patch_unit(service: str, provides: dict[str, Any], consumes: dict[str, Any]) -> DeployResult:
    """Redeploy a unit with some parameters changed, keeping its processes' current states."""
    unit = ServiceUnit.objects.filter(service=service).first()
    if unit is None:
        raise UnknownService(service)
    current_provides, current_consumes = unit_parameters(unit)
    merged_provides = {**current_provides, **provides}
    if str(merged_provides.get("service-name") or "") != service:
        raise ParameterError("The ASE service name of a deployed unit cannot change; deploy a new unit instead.")
    config, notices = parse_service_unit(
        unit.name, merged_provides, {**current_consumes, **consumes}, component_config()
    )
    result = deploy(config, notices, descriptor=unit.descriptor)
    ServiceUnit.objects.filter(pk=result.unit.pk).update(
        posting_started=unit.posting_started, sending_started=unit.sending_started
    )
    result.unit.refresh_from_db()
    transaction.on_commit(notify_workers)
    return result


def set_ingress_token(service: str) -> str:
    """Require a token on the unit's ingress; returns the new token (only its SHA-256 is kept)."""
    token = secrets.token_urlsafe(32)
    if not ServiceUnit.objects.filter(service=service).update(
        ingress_token_hash=hashlib.sha256(token.encode()).hexdigest()
    ):
        raise UnknownService(service)
    log.info("service unit '%s': ingress token set", service)
    return token


def clear_ingress_token(service: str) -> None:
    """Let the unit's ingress take requests without a token again."""
    if not ServiceUnit.objects.filter(service=service).update(ingress_token_hash=""):
        raise UnknownService(service)
    log.info("service unit '%s': ingress token removed", service)


CONNECTION_PARAMETERS = ("broker_transport", "broker_url", "broker_vhost")


def update_component(**values: int | None) -> ComponentConfig:
    """Change the hot-updatable runtime parameters (CFG-010: ``time_to_live``, ``stop_timeout``; None = back to
    the environment's value). Every instance applies them at its next sync, sent at once."""
    unknown = set(values) - {"time_to_live", "stop_timeout"}
    if unknown & set(CONNECTION_PARAMETERS):
        raise ConnectionParametersLocked(sorted(unknown & set(CONNECTION_PARAMETERS)))
    if unknown:
        raise ParameterError(f"Unknown component parameter(s): {', '.join(sorted(unknown))}.")
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ParameterError(f"Invalid value '{value}' for '{name}': an integer number >= 0 is expected.")
    with transaction.atomic():
        settings_row = ComponentSettings.load()
        for name, value in values.items():
            setattr(settings_row, name, value)
        settings_row.save()
        transaction.on_commit(notify_workers)
    config = component_config()
    log.info("component runtime parameters: time-to-live=%s stop-timeout=%s", config.time_to_live, config.stop_timeout)
    return config


class ConnectionParametersLocked(Exception):
    """The connection parameters cannot be hot-updated (SE-ASE-CFG-005)."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(
            f"The connection parameters ({', '.join(names)}) cannot be changed while the component is running "
            "(SE-ASE-CFG-005): set ASE_BROKER_TRANSPORT, ASE_BROKER_URL, ASE_BROKER_VHOST and restart."
        )
