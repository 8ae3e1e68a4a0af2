"""Invoking a target service over HTTP and classifying its answer.

| answer                                          | outcome  |
| ----------------------------------------------- | -------- |
| 2xx                                             | ACK      |
| 4xx except 408 and 429, or a SOAP fault         | FAULT    |
| 3xx, 5xx, 408, 429, connection refused or reset | ERROR    |
| no answer within the service unit's timeout     | TIMEOUT  |
"""

from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass

import urllib3

from ase_engine.config import ServiceUnitConfig
from ase_engine.message import Message

_SOAP_FAULT = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?Fault[\s>/]")
_SOAP_ENVELOPE = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?Envelope[\s>]")
# How much of the target's answer we read to classify it and keep it.
_ANSWER_LIMIT = 65_536


class Outcome(enum.Enum):
    ACK = "ack"
    FAULT = "fault"
    ERROR = "error"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    status: int | None
    reason: str
    answer: str | None
    duration_ms: int


def classify(status: int, content_type: str, body: bytes) -> Outcome:
    if 200 <= status < 300:
        return Outcome.ACK
    if is_soap_fault(content_type, body):
        return Outcome.FAULT
    if 400 <= status < 500 and status not in (408, 429):
        return Outcome.FAULT
    return Outcome.ERROR


def is_soap_fault(content_type: str, body: bytes) -> bool:
    head = body[:_ANSWER_LIMIT]
    return "xml" in content_type.lower() and bool(_SOAP_ENVELOPE.search(head)) and bool(_SOAP_FAULT.search(head))


class HttpTarget:
    """Posts a message to its service unit's target URL. One instance per process: a thread-safe pool.

    urllib3 rather than httpx on this path: it costs 40% less CPU per call
    (measured: docs/BENCHMARKS.md), and the sending process spends most of its
    CPU in the HTTP client.
    """

    def __init__(self, max_connections: int = 16, user_agent: str = "ASE") -> None:
        self._pool = urllib3.PoolManager(num_pools=64, maxsize=max_connections, block=False)
        self._user_agent = user_agent
        # Per target URL: its connection pool and request path, so that a call does not parse the URL
        # and look the pool up again (a fifth of the client's CPU per call, measured).
        self._targets: dict[str, tuple[urllib3.HTTPConnectionPool, str]] = {}
        self._timeouts: dict[int, urllib3.Timeout] = {}

    def close(self) -> None:
        self._targets.clear()
        self._pool.clear()

    def _target(self, url: str) -> tuple[urllib3.HTTPConnectionPool, str]:
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = (self._pool.connection_from_url(url), urllib3.util.parse_url(url).request_uri)
        return target

    def _timeout(self, timeout_ms: int) -> urllib3.Timeout:
        timeout = self._timeouts.get(timeout_ms)
        if timeout is None:
            timeout = self._timeouts[timeout_ms] = urllib3.Timeout(connect=timeout_ms / 1000, read=timeout_ms / 1000)
        return timeout

    def invoke(self, unit: ServiceUnitConfig, message: Message) -> Result:
        headers = {
            "User-Agent": self._user_agent,
            "Content-Type": message.content_type,
            "X-ASE-Message-Id": message.id,
            "X-ASE-Service": message.service,
            "X-ASE-MEP": message.mep,
            "X-ASE-Attempt": str(message.attempt + 1),
            "X-ASE-Incoming-Timestamp": str(message.incoming_timestamp),
        }
        for name, value in message.properties.items():
            headers[f"X-ASE-Property-{name}"] = value
        if message.idempotency_key:
            headers["Idempotency-Key"] = message.idempotency_key
        timeout = unit.timeout_ms / 1000
        started = time.monotonic()
        try:
            pool, path = self._target(unit.target_url)
            response = pool.urlopen(
                "POST",
                path,
                body=message.payload,
                headers=headers,
                timeout=self._timeout(unit.timeout_ms),
                retries=False,
                redirect=False,
                preload_content=False,
            )
            try:
                body = response.read(_ANSWER_LIMIT)
            finally:
                response.release_conn()
        except urllib3.exceptions.NewConnectionError as exc:
            # Refused or unreachable (urllib3 files it under connect timeouts): a technical error.
            return Result(Outcome.ERROR, None, f"ConnectError: {_reason(exc)}", None, _ms(started))
        except urllib3.exceptions.TimeoutError as exc:
            reason = f"no answer within {timeout:g} s ({type(exc).__name__})"
            return Result(Outcome.TIMEOUT, None, reason, None, _ms(started))
        except urllib3.exceptions.HTTPError as exc:
            return Result(Outcome.ERROR, None, f"{type(exc).__name__}: {_reason(exc)}", None, _ms(started))
        status = response.status
        outcome = classify(status, response.headers.get("content-type", ""), body)
        answer = body.decode("utf-8", "replace") if outcome is not Outcome.ACK else None
        return Result(outcome, status, f"HTTP {status}", answer, _ms(started))


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "reason", None) or exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
