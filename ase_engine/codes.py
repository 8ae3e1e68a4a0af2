"""The catalog of the specification's message codes (SE-ASE-Ixxxx/Wxxxx/Exxxx).

Every code exists once, here, with its level and its template. Templates use
``str.format`` fields named after the spec's placeholders. Codes whose wording
named JNDI or JMS (E0002-E0005, E0015) keep their number and speak of the
STOMP connection parameters instead; docs/REQUIREMENTS.md lists them.

Codes above 1000 are ours (outside the spec's range).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any


class Level(enum.IntEnum):
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR


@dataclass(frozen=True)
class Code:
    id: str
    level: Level
    template: str

    def render(self, **params: Any) -> str:
        """The message body: the template with its placeholders filled."""
        return self.template.format(**params)

    def public(self, **params: Any) -> str:
        """The text returned to a caller: ``ERROR SE-ASE-E0010: <message>``."""
        return f"{self.level.name} {self.id}: {self.render(**params)}"


def _catalog(*codes: Code) -> dict[str, Code]:
    catalog: dict[str, Code] = {}
    for code in codes:
        if code.id in catalog:
            raise ValueError(f"duplicate message code {code.id}")
        catalog[code.id] = code
    return catalog


INF, WRN, ERR = Level.INFO, Level.WARNING, Level.ERROR

CATALOG: dict[str, Code] = _catalog(
    # -- errors ---------------------------------------------------------------
    Code("SE-ASE-E0001", ERR, "An error occurs creating the persistence area '{area}': {error}."),
    Code("SE-ASE-E0002", ERR, "The mandatory parameter 'Broker transport' is not set"),
    Code("SE-ASE-E0003", ERR, "Broker transport not supported: {transport}."),
    Code("SE-ASE-E0004", ERR, "The mandatory parameter 'Broker URL' is not set"),
    Code("SE-ASE-E0005", ERR, "The mandatory parameter 'Broker virtual host' is not set"),
    Code("SE-ASE-E0006", ERR, "An error occurs during the connection to the persistence service: {reason}."),
    Code(
        "SE-ASE-E0007",
        ERR,
        "An error occurs removing a request from the persistence area '{area}': {reason}.",
    ),
    Code("SE-ASE-E0008", ERR, "An error occurs purging the persistence area {area}: {reason}."),
    Code("SE-ASE-E0009", ERR, "The persistence area '{area}' does not exist."),
    Code(
        "SE-ASE-E0010",
        ERR,
        "Only one-way request (InOnly or RobustInOnly) are supported. Received MEP: {mep}.",
    ),
    Code(
        "SE-ASE-E0011",
        ERR,
        "An error occurs saving a request in the persistence area '{area}': {reason}.",
    ),
    Code("SE-ASE-E0012", ERR, "The persistence area '{area}' with sub-type PENDING can not be recycled."),
    Code(
        "SE-ASE-E0013",
        ERR,
        "The target service provider is not idempotent. Use the boolean flag to force the "
        "recycling of the persistence area '{area}'.",
    ),
    Code("SE-ASE-E0015", ERR, "The mandatory parameter 'Broker URL' is malformed"),
    Code(
        "SE-ASE-E0017",
        ERR,
        "A request '{request_id}' cannot be processed because of timeout on target service "
        "invocation. The request is moved the queue '{queue}'.",
    ),
    Code("SE-ASE-E0018", ERR, "An error occurs recycling the persistence area {area}: {reason}."),
    Code(
        "SE-ASE-E0019",
        ERR,
        "An error occurs starting the posting process: {reason}. Unexpected error can occurs next.",
    ),
    Code(
        "SE-ASE-E0020",
        ERR,
        "A request '{request_id}' cannot be processed because of an error on target service "
        "invocation. The request is moved the queue '{queue}'.",
    ),
    Code(
        "SE-ASE-E0021",
        ERR,
        "The persistence area '{area}' is provided with an invalid sub-type. Only following "
        "sub-type are supported: PENDING, EXPIRED, TIMEDOUT, ERROR, FAULT and ALL",
    ),
    Code(
        "SE-ASE-E0022",
        ERR,
        "The parameter '{parameter}' is defined twice with different values in both sections "
        "'consumes' and 'provides' of the JBI service unit descriptor. It should be declared once.",
    ),
    # -- information ----------------------------------------------------------
    Code("SE-ASE-I0001", INF, "The posting process is started."),
    Code("SE-ASE-I0002", INF, "The sending process is started."),
    Code("SE-ASE-I0003", INF, "The posting process is stopped."),
    Code("SE-ASE-I0004", INF, "The sending process is stopped."),
    # -- warnings -------------------------------------------------------------
    Code(
        "SE-ASE-W0001",
        WRN,
        "Two sections 'provides' are declared in the JBI descriptor of the service-unit "
        "'{su_name}' instead of only one. Unexpected error can occur",
    ),
    Code(
        "SE-ASE-W0002",
        WRN,
        "Two sections 'consume' are declared in the JBI descriptor of the service-unit "
        "'{su_name}' instead of only one. Unexpected error can occur",
    ),
    Code(
        "SE-ASE-W0003",
        WRN,
        "Interface name of both sections 'consume' ({itf_consume}) and 'provide' ({itf_provide}) "
        "are different. '{itf_consume}' is used as interface name of the section 'provide'.",
    ),
    Code(
        "SE-ASE-W0004",
        WRN,
        "An error occurs creating the persisted request listener: {reason}. "
        "No administrative JMX API will be available.",
    ),
    Code("SE-ASE-W0006", WRN, "An error occurs during the creation of the administration JMX API: {reason}."),
    Code(
        "SE-ASE-W0007",
        WRN,
        "An error occurs during the deletion of the administration JMX API: {reason}. "
        "Unexpected error can occur using the administration JMX API.",
    ),
    Code("SE-ASE-W0008", WRN, "An error occurs during the disconnection to the persistence system: {reason}."),
    Code(
        "SE-ASE-W0009",
        WRN,
        "An error occurs stopping the posting process: {reason}. Incoming requests may be processed.",
    ),
    Code(
        "SE-ASE-W0010",
        WRN,
        "An error occurs stopping the sending process: {reason}. Persisted request may be sent "
        "to the target service provider.",
    ),
    Code(
        "SE-ASE-W0011",
        WRN,
        "The TTL of a request is expired. The request was moved to the persistence area '{area}'.",
    ),
    Code(
        "SE-ASE-W0012",
        WRN,
        "The parameter '{parameter}' is defined twice with the same value in both sections "
        "'consumes' and 'provides' of the JBI service unit descriptor. It should be declared once.",
    ),
    Code(
        "SE-ASE-W0013",
        WRN,
        "Invalid boolean value '{value}' for parameter 'is-idempotent'. Default value used: {default}.",
    ),
    Code(
        "SE-ASE-W0014",
        WRN,
        "Invalid integer number value '{value}' for parameter 'time-to-live'. Default value used: {default}.",
    ),
    Code(
        "SE-ASE-W0015",
        WRN,
        "Invalid integer number value '{value}' for parameter 'stop-timeout'. Default value used: {default}.",
    ),
    Code(
        "SE-ASE-W0016",
        WRN,
        "Retry policy configuration and TTL are not compliant. TTL is increased to {ttl} to be "
        "compliant with the retry policy.",
    ),
    Code(
        "SE-ASE-W0017",
        WRN,
        "The optional parameter 'mustBeAutomaticallyStarted' has not a boolean value. "
        "The default value ({default}) is used",
    ),
    Code("SE-ASE-W0018", WRN, "The posting process is already started. Operation aborted."),
    Code("SE-ASE-W0019", WRN, "The posting process is already stopped. Operation aborted."),
    Code("SE-ASE-W0020", WRN, "The sending process is already stopped. Operation aborted."),
    Code("SE-ASE-W0021", WRN, "The sending process is already started. Operation aborted."),
    Code(
        "SE-ASE-W0022",
        WRN,
        "A technical error occurs when invoking the target service invokation on request "
        "'{request_id}'. Waiting for {duration} seconds before next try ({attempt}/{attempts}).",
    ),
    Code("SE-ASE-W0023", WRN, "An error occurs starting the sending process: {reason}."),
    Code(
        "SE-ASE-W0024",
        WRN,
        "Timeout on target service invocation on request '{request_id}'. Waiting for {duration} "
        "seconds before next try ({attempt}/{attempts}).",
    ),
    # -- ours (outside the spec's range) ---------------------------------------
    # Duplicate elimination at the ingress (Idempotency-Key).
    Code(
        "SE-ASE-I1001",
        INF,
        "A request with the Idempotency-Key '{key}' was already accepted for the service '{service}' as "
        "'{request_id}'. It is not persisted again; the first answer is returned.",
    ),
    Code(
        "SE-ASE-E1001",
        ERR,
        "The Idempotency-Key '{key}' was already used for the service '{service}' with a different request "
        "(body, content type, MEP or properties). Use a new key for a new request.",
    ),
    Code(
        "SE-ASE-E1002",
        ERR,
        "A request with the Idempotency-Key '{key}' for the service '{service}' is still being persisted after "
        "{seconds} seconds. Retry later.",
    ),
    Code(
        "SE-ASE-E1003",
        ERR,
        "The duplicate check of the Idempotency-Key '{key}' for the service '{service}' is unavailable: {reason}. "
        "The request is not accepted; retry later.",
    ),
    # Target protection: circuit breaker and rate limit.
    Code(
        "SE-ASE-W1001",
        WRN,
        "The circuit breaker of the service '{service}' opens after {failures} consecutive errors or timeouts "
        "of its target. Sending is paused for {cooldown} seconds; requests stay in the persistence area '{area}'.",
    ),
    Code(
        "SE-ASE-I1002",
        INF,
        "The circuit breaker of the service '{service}' is half-open: one request probes the target.",
    ),
    Code(
        "SE-ASE-I1003",
        INF,
        "The circuit breaker of the service '{service}' is closed: the target answered, sending resumes.",
    ),
    # Ordered delivery per group.
    Code(
        "SE-ASE-W1002",
        WRN,
        "The group '{group}' of the service '{service}' waits: its head request '{request_id}' {reason}.",
    ),
)

SPEC_CODE_COUNT = 47


def get(code_id: str) -> Code:
    return CATALOG[code_id]


def render(code_id: str, **params: Any) -> str:
    return CATALOG[code_id].render(**params)


def public(code_id: str, **params: Any) -> str:
    return CATALOG[code_id].public(**params)


def log(logger: logging.Logger, code_id: str, **params: Any) -> str:
    """Log a coded message at the code's level, never with a stack trace.

    The record carries ``ase_code`` as an extra attribute so handlers and tests
    can select on it. Returns the message body.
    """
    code = CATALOG[code_id]
    body = code.render(**params)
    logger.log(code.level, "%s: %s", code.id, body, extra={"ase_code": code.id}, exc_info=False)
    return body
