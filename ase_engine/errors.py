"""One exception tree for the engine.

An ``AseError`` carries a catalog code and its parameters; ``public`` is the
text a caller gets (``ERROR SE-ASE-E0011: ...``). Callers log it with
``codes.log`` (code, no stack trace) and answer with ``public``.
"""

from __future__ import annotations

from typing import Any

from ase_engine import codes


class AseError(Exception):
    """An error the specification names with a code."""

    def __init__(self, code_id: str, **params: Any) -> None:
        self.code = codes.get(code_id)
        self.params = params
        super().__init__(self.message)

    @property
    def message(self) -> str:
        return self.code.render(**self.params)

    @property
    def public(self) -> str:
        return self.code.public(**self.params)


class ConfigurationError(AseError):
    """A component or service-unit parameter is missing, malformed or contradictory."""


class DeploymentError(AseError):
    """A service unit cannot be deployed (E0001, E0022, or a descriptor we cannot read)."""


class PersistenceError(AseError):
    """The broker did not confirm a persistent operation (E0006, E0007, E0011)."""


class ProcessStateError(AseError):
    """A start/stop asked for a process already in that state (W0018-W0021)."""


class BrokerUnavailable(Exception):
    """The STOMP connection is down or did not answer in time. Carries the reason text."""


class DescriptorError(Exception):
    """A JBI descriptor that is not well-formed or lacks a mandatory section."""


class AreaError(AseError):
    """An administrative action on a persistence area failed or was refused (E0008, E0009, E0012, E0013, E0018,
    E0021)."""
