"""The admin audit trail: one row per mutating call, from the API, the console or a command."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from console.models import AuditEntry

log = logging.getLogger("ase.audit")


def record(
    user: AbstractBaseUser | AnonymousUser | None,
    action: str,
    parameters: dict[str, Any] | None = None,
    result: str = "ok",
    succeeded: bool = True,
) -> AuditEntry:
    """Write who did what, with which parameters, and how it ended (``result``: a short text)."""
    actor = user if user is not None and user.is_authenticated else None
    username = actor.get_username() if actor is not None else "(command line)" if user is None else "(anonymous)"
    entry = AuditEntry.objects.create(
        user=actor,
        username=username,
        action=action,
        parameters=parameters or {},
        result=result[:2000],
        succeeded=succeeded,
    )
    log.info("audit: %s %s %s -> %s", username, action, parameters or {}, result[:200])
    return entry
