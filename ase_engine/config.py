"""Component and service-unit configuration, with the specification's validation.

Parameters arrive as text (a JBI descriptor, environment variables, a form);
``parse_*`` functions turn them into frozen dataclasses and return the
warnings the specification asks for (W0013-W0017) as ``Notice`` objects, or
raise ``ConfigurationError`` for the fatal ones (E0002-E0005, E0015).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ase_engine import codes
from ase_engine.errors import ConfigurationError, DeploymentError

SUPPORTED_TRANSPORTS = ("stomp",)
DEFAULT_STOP_TIMEOUT = 60
DEFAULT_TIME_TO_LIVE = 0
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_RETRY_NUMBER = 3
DEFAULT_RETRY_BASE_INTERVAL = 10
DEFAULT_RETRY_FACTOR = 3
DEFAULT_BREAKER_COOLDOWN = 30
GROUP_HEADER = "X-ASE-Group"
# What a group does while its head waits for a retry or sits parked (ordered delivery).
GROUP_WAIT, GROUP_SKIP = "wait", "skip"

# Parameters of ours in the consumes section (issue 7: target protection and ordered delivery).
PROTECTION_PARAMETERS = (
    "circuit-breaker-threshold",
    "circuit-breaker-cooldown",
    "rate-limit",
    "ordered-groups",
    "ordered-group-blocked",
)

# Queue names and ASE service names end up in URLs and STOMP destinations.
NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")
_HOST_PORT_RE = re.compile(r"^(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")


@dataclass(frozen=True)
class Notice:
    """A coded message produced while reading configuration (a warning, mostly)."""

    code: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def message(self) -> str:
        return codes.render(self.code, **self.params)

    @property
    def public(self) -> str:
        return codes.public(self.code, **self.params)


class ParameterError(ValueError):
    """A parameter the specification gives no code for has a value we cannot use."""


# -- value parsers ---------------------------------------------------------------


def parse_bool(raw: str | bool | None, default: bool) -> tuple[bool, bool]:
    """Return (value, valid). Absent → default and valid; unreadable → default and invalid."""
    if raw is None or raw == "":
        return default, True
    if isinstance(raw, bool):
        return raw, True
    text = str(raw).strip().lower()
    if text == "true":
        return True, True
    if text == "false":
        return False, True
    return default, False


def parse_int(raw: str | int | None, default: int | None, minimum: int = 0) -> tuple[int | None, bool]:
    """Return (value, valid) for a non-negative decimal integer."""
    if raw is None or raw == "":
        return default, True
    if isinstance(raw, bool):
        return default, False
    if isinstance(raw, int):
        return (raw, True) if raw >= minimum else (default, False)
    text = str(raw).strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        return default, False
    value = int(text)
    if value < minimum:
        return default, False
    return value, True


def _required_int(params: Mapping[str, Any], name: str, default: int, minimum: int) -> int:
    value, valid = parse_int(params.get(name), default, minimum)
    if not valid or value is None:
        raise ParameterError(
            f"Invalid value '{params.get(name)}' for parameter '{name}': an integer number >= {minimum} is expected."
        )
    return value


# -- component -------------------------------------------------------------------


@dataclass(frozen=True)
class ComponentConfig:
    """The component's parameters (SE-ASE-CFG-005, CFG-010).

    The spec's three JNDI/JMS connection parameters become the STOMP ones:
    ``broker_transport`` (was the initial context factory), ``broker_url``
    (was the JNDI provider URL: ``host:port`` or a comma-separated failover
    list) and ``broker_vhost`` (was the connection factory name: the STOMP
    ``host`` header).
    """

    broker_transport: str = "stomp"
    broker_url: str = "127.0.0.1:61613"
    broker_vhost: str = "localhost"
    broker_login: str = ""
    broker_passcode: str = ""
    stop_timeout: int = DEFAULT_STOP_TIMEOUT
    time_to_live: int = DEFAULT_TIME_TO_LIVE
    receipt_timeout: float = 10.0

    @property
    def hosts(self) -> list[tuple[str, int]]:
        return parse_broker_url(self.broker_url)

    def with_runtime(self, *, stop_timeout: int | None = None, time_to_live: int | None = None) -> ComponentConfig:
        """A copy with hot-updated runtime parameters (CFG-010)."""
        return replace(
            self,
            stop_timeout=self.stop_timeout if stop_timeout is None else stop_timeout,
            time_to_live=self.time_to_live if time_to_live is None else time_to_live,
        )


def parse_broker_url(url: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` → list of pairs; raises E0015 when malformed."""
    hosts: list[tuple[str, int]] = []
    for part in url.split(","):
        match = _HOST_PORT_RE.match(part.strip())
        if not match or not 0 < int(match["port"]) < 65536:
            raise ConfigurationError("SE-ASE-E0015")
        hosts.append((match["host"].strip("[]"), int(match["port"])))
    return hosts


def parse_component(params: Mapping[str, Any]) -> tuple[ComponentConfig, list[Notice]]:
    """Check the component parameters as at installation (SE-ASE-000).

    Keys: ``broker-transport``, ``broker-url``, ``broker-vhost``, ``broker-login``,
    ``broker-passcode``, ``stop-timeout``, ``time-to-live``, ``receipt-timeout``.
    """
    notices: list[Notice] = []

    def text(name: str) -> str:
        value = params.get(name)
        return "" if value is None else str(value).strip()

    transport = text("broker-transport")
    if not transport:
        raise ConfigurationError("SE-ASE-E0002")
    if transport not in SUPPORTED_TRANSPORTS:
        raise ConfigurationError("SE-ASE-E0003", transport=transport)
    url = text("broker-url")
    if not url:
        raise ConfigurationError("SE-ASE-E0004")
    parse_broker_url(url)
    vhost = text("broker-vhost")
    if not vhost:
        raise ConfigurationError("SE-ASE-E0005")

    ttl, valid = parse_int(params.get("time-to-live"), DEFAULT_TIME_TO_LIVE)
    if not valid:
        notices.append(Notice("SE-ASE-W0014", {"value": params.get("time-to-live"), "default": DEFAULT_TIME_TO_LIVE}))
    stop_timeout, valid = parse_int(params.get("stop-timeout"), DEFAULT_STOP_TIMEOUT)
    if not valid:
        notices.append(Notice("SE-ASE-W0015", {"value": params.get("stop-timeout"), "default": DEFAULT_STOP_TIMEOUT}))
    receipt_timeout = params.get("receipt-timeout")
    try:
        receipt = float(receipt_timeout) if receipt_timeout not in (None, "") else 10.0
    except (TypeError, ValueError):
        raise ParameterError(f"Invalid value '{receipt_timeout}' for parameter 'receipt-timeout'.") from None
    if not math.isfinite(receipt) or receipt <= 0:
        raise ParameterError("Parameter 'receipt-timeout' must be a positive finite number of seconds.")
    assert ttl is not None and stop_timeout is not None
    return (
        ComponentConfig(
            broker_transport=transport,
            broker_url=url,
            broker_vhost=vhost,
            broker_login=text("broker-login"),
            broker_passcode=text("broker-passcode"),
            stop_timeout=stop_timeout,
            time_to_live=ttl,
            receipt_timeout=receipt,
        ),
        notices,
    )


# -- service unit ----------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """SE-ASE-PROC-026: ``number`` retries after the first call; delay n = base × factor^(n-1)."""

    number: int = DEFAULT_RETRY_NUMBER
    base_interval: int = DEFAULT_RETRY_BASE_INTERVAL
    factor: int = DEFAULT_RETRY_FACTOR

    def delay(self, retry: int) -> int:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        return int(self.base_interval * self.factor ** (retry - 1))

    @property
    def total_duration(self) -> int:
        return sum(self.delay(n) for n in range(1, self.number + 1))


@dataclass(frozen=True)
class QueueNames:
    """The persistence area of one ASE service: one queue per sub-type."""

    pending: str
    expired: str
    timedout: str
    error: str
    fault: str

    @classmethod
    def default(cls, service: str) -> QueueNames:
        return cls(service, f"{service}_expired", f"{service}_timedout", f"{service}_error", f"{service}_fault")

    def retry(self, number: int) -> str:
        """The RETRY queue of requests waiting for retry ``number`` (1-based).

        One queue per retry number: every request in it waits the same delay,
        so the queue's order is the order in which its requests fall due.
        """
        return f"{self.pending}_retry_{number}"

    def all(self) -> list[str]:
        """Every distinct queue but the RETRY ones, PENDING first."""
        seen: list[str] = []
        for name in (self.pending, self.expired, self.timedout, self.error, self.fault):
            if name not in seen:
                seen.append(name)
        return seen


# Queue-name parameters of the descriptor, mapped to QueueNames fields.
QUEUE_PARAMETERS = {
    "persistence-area-name": "pending",
    "persistence-area-name-expired": "expired",
    "persistence-area-name-timedout": "timedout",
    "persistence-area-name-error": "error",
    "persistence-area-name-fault": "fault",
}


@dataclass(frozen=True)
class ServiceUnitConfig:
    """One deployed service unit: the ASE service (provides) and its target (consumes)."""

    name: str
    service: str
    target_url: str
    interface: str = ""
    endpoint: str = ""
    provides_auto_start: bool = True
    stop_timeout: int | None = None
    target_service: str = ""
    target_endpoint: str = ""
    target_interface: str = ""
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    consumes_auto_start: bool = True
    is_idempotent: bool = False
    time_to_live: int | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    mep: str = "InOnly"
    queues: QueueNames | None = None
    # Circuit breaker: open after this many consecutive errors/timeouts (0 = no breaker), for ``cooldown`` s.
    breaker_threshold: int = 0
    breaker_cooldown: int = DEFAULT_BREAKER_COOLDOWN
    # Rate limit towards the target, messages per second across every instance (0 = none).
    rate_limit: float = 0.0
    # Ordered delivery per group (``X-ASE-Group``); a blocked group waits or skips its parked head.
    ordered_groups: bool = False
    group_blocked: str = GROUP_WAIT

    def __post_init__(self) -> None:
        if self.queues is None:
            object.__setattr__(self, "queues", QueueNames.default(self.service))

    @property
    def areas(self) -> QueueNames:
        assert self.queues is not None
        return self.queues

    @property
    def retries(self) -> bool:
        """Errors and timeouts are retried only for an idempotent target (PROC-026)."""
        return self.is_idempotent and self.retry.number > 0

    def retry_queues(self) -> list[str]:
        return [self.areas.retry(n) for n in range(1, self.retry.number + 1)] if self.retries else []

    def effective_ttl(self, component: ComponentConfig) -> int:
        return component.time_to_live if self.time_to_live is None else self.time_to_live

    def effective_stop_timeout(self, component: ComponentConfig) -> int:
        return component.stop_timeout if self.stop_timeout is None else self.stop_timeout


def local_part(qname: str) -> str:
    """``{ns}Local``, ``prefix:Local`` or ``Local`` → ``Local``."""
    if qname.startswith("{"):
        return qname.split("}", 1)[1]
    return qname.rsplit(":", 1)[-1]


def parse_service_unit(
    su_name: str,
    provides: Mapping[str, Any],
    consumes: Mapping[str, Any],
    component: ComponentConfig | None = None,
) -> tuple[ServiceUnitConfig, list[Notice]]:
    """Build a service unit from the raw parameters of its two sections.

    ``provides`` keys: ``service-name``, ``interface-name``, ``endpoint-name``,
    ``mustBeAutomaticallyStarted``, ``stop-timeout`` and queue-name parameters.
    ``consumes`` keys: ``service-name``, ``interface-name``, ``endpoint-name``,
    ``target-url``, ``timeout``, ``mep``, ``mustBeAutomaticallyStarted``,
    ``is-idempotent``, ``time-to-live``, ``retry-policy-*`` and queue-name
    parameters. Raises ``DeploymentError`` (E0022, E0001) or ``ParameterError``.
    """
    component = component or ComponentConfig()
    notices: list[Notice] = []

    service = local_part(str(provides.get("service-name") or "").strip())
    if not service:
        raise ParameterError("The section 'provides' must declare a 'service-name'.")
    if not NAME_RE.match(service):
        raise ParameterError(f"Invalid ASE service name '{service}': letters, digits, '_', '.' and '-' only.")
    target_url = str(consumes.get("target-url") or "").strip()
    if not re.match(r"^https?://[^\s/]+", target_url):
        raise ParameterError(
            f"Invalid or missing parameter 'target-url' ('{target_url}'): an http:// or https:// URL is expected."
        )

    itf_provide = str(provides.get("interface-name") or "").strip()
    itf_consume = str(consumes.get("interface-name") or "").strip()
    interface = itf_provide or itf_consume
    if itf_provide and itf_consume and itf_provide != itf_consume:
        notices.append(Notice("SE-ASE-W0003", {"itf_consume": itf_consume, "itf_provide": itf_provide}))
        interface = itf_consume

    def auto_start(section: Mapping[str, Any]) -> bool:
        value, valid = parse_bool(section.get("mustBeAutomaticallyStarted"), True)
        if not valid:
            notices.append(Notice("SE-ASE-W0017", {"default": "true"}))
        return value

    provides_auto_start = auto_start(provides)
    consumes_auto_start = auto_start(consumes)

    is_idempotent, valid = parse_bool(consumes.get("is-idempotent"), False)
    if not valid:
        notices.append(Notice("SE-ASE-W0013", {"value": consumes.get("is-idempotent"), "default": "false"}))

    ttl, valid = parse_int(consumes.get("time-to-live"), None)
    if not valid:
        notices.append(
            Notice("SE-ASE-W0014", {"value": consumes.get("time-to-live"), "default": component.time_to_live})
        )
    stop_timeout, valid = parse_int(provides.get("stop-timeout"), None)
    if not valid:
        notices.append(
            Notice("SE-ASE-W0015", {"value": provides.get("stop-timeout"), "default": component.stop_timeout})
        )

    retry = RetryPolicy(
        number=_required_int(consumes, "retry-policy-number", DEFAULT_RETRY_NUMBER, 0),
        base_interval=_required_int(consumes, "retry-policy-base-interval", DEFAULT_RETRY_BASE_INTERVAL, 0),
        factor=_required_int(consumes, "retry-policy-factor", DEFAULT_RETRY_FACTOR, 1),
    )
    timeout_ms = _required_int(consumes, "timeout", DEFAULT_TIMEOUT_MS, 1)

    # SE-ASE-PROC-026: a TTL shorter than the retry schedule is raised to fit it.
    effective_ttl = component.time_to_live if ttl is None else ttl
    if is_idempotent and effective_ttl > 0 and retry.number > 0:
        needed = retry.total_duration + -(-timeout_ms * (retry.number + 1) // 1000)
        if effective_ttl < needed:
            notices.append(Notice("SE-ASE-W0016", {"ttl": needed}))
            ttl = needed

    mep = str(consumes.get("mep") or "InOnly").strip() or "InOnly"

    breaker_threshold = _required_int(consumes, "circuit-breaker-threshold", 0, 0)
    breaker_cooldown = _required_int(consumes, "circuit-breaker-cooldown", DEFAULT_BREAKER_COOLDOWN, 1)
    rate_limit = _rate(consumes.get("rate-limit"))
    ordered_groups, valid = parse_bool(consumes.get("ordered-groups"), False)
    if not valid:
        raise ParameterError(f"Invalid value '{consumes.get('ordered-groups')}' for parameter 'ordered-groups'.")
    group_blocked = str(consumes.get("ordered-group-blocked") or GROUP_WAIT).strip().lower()
    if group_blocked not in (GROUP_WAIT, GROUP_SKIP):
        raise ParameterError(
            f"Invalid value '{consumes.get('ordered-group-blocked')}' for parameter 'ordered-group-blocked': "
            f"'{GROUP_WAIT}' or '{GROUP_SKIP}' is expected."
        )

    queues = _queue_names(service, provides, consumes, notices)
    config = ServiceUnitConfig(
        name=su_name or service,
        service=service,
        target_url=target_url,
        interface=interface,
        endpoint=str(provides.get("endpoint-name") or "").strip(),
        provides_auto_start=provides_auto_start,
        stop_timeout=stop_timeout,
        target_service=local_part(str(consumes.get("service-name") or "").strip()),
        target_endpoint=str(consumes.get("endpoint-name") or "").strip(),
        target_interface=itf_consume,
        timeout_ms=timeout_ms,
        consumes_auto_start=consumes_auto_start,
        is_idempotent=is_idempotent,
        time_to_live=ttl,
        retry=retry,
        mep=mep,
        queues=queues,
        breaker_threshold=breaker_threshold,
        breaker_cooldown=breaker_cooldown,
        rate_limit=rate_limit,
        ordered_groups=ordered_groups,
        group_blocked=group_blocked,
    )
    return config, notices


def _rate(raw: Any) -> float:
    """``rate-limit``: messages per second, a non-negative decimal number (0 or absent: no limit)."""
    if raw is None or str(raw).strip() == "":
        return 0.0
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ParameterError(f"Invalid value '{raw}' for parameter 'rate-limit': a number of messages/s >= 0.")
    return value


def _queue_names(
    service: str, provides: Mapping[str, Any], consumes: Mapping[str, Any], notices: list[Notice]
) -> QueueNames:
    """Apply PROC-000's queue-name rules: W0012 for a same-value duplicate, E0022 for a conflict."""
    names = QueueNames.default(service)
    values: dict[str, str] = {}
    for parameter, attr in QUEUE_PARAMETERS.items():
        in_provides = str(provides.get(parameter) or "").strip()
        in_consumes = str(consumes.get(parameter) or "").strip()
        if in_provides and in_consumes:
            if in_provides != in_consumes:
                raise DeploymentError("SE-ASE-E0022", parameter=parameter)
            notices.append(Notice("SE-ASE-W0012", {"parameter": parameter}))
        value = in_provides or in_consumes
        if value:
            if not NAME_RE.match(value):
                raise DeploymentError(
                    "SE-ASE-E0001", area=value, error="letters, digits, '_', '.' and '-' only in a queue name"
                )
            values[attr] = value
    # Unset names keep the spec's default: the ASE service's local name plus a suffix.
    return replace(names, **values)
