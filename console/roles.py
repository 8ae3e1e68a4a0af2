"""Who may do what: three roles, kept as Django groups, each including the one below it.

- viewer: reads everything (areas, messages, history, status, audit, reports).
- operator: viewer + starts/stops processes, purges and recycles areas, launches reports.
- admin: operator + deploys/undeploys service units, changes the component configuration, manages users.

A superuser is an admin. The REST API (permission classes), the console views and
the management commands all ask :func:`has_role`; nothing else decides.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.db import models


class Role(models.TextChoices):
    VIEWER = "ase-viewer", "viewer"
    OPERATOR = "ase-operator", "operator"
    ADMIN = "ase-admin", "admin"


# Each role and the roles it includes.
_RANK = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


def role_of(user: AbstractBaseUser | AnonymousUser) -> Role | None:
    """The highest role the user holds, or None (anonymous, inactive or in no ASE group)."""
    if not user.is_authenticated or not user.is_active:
        return None
    if getattr(user, "is_superuser", False):
        return Role.ADMIN
    names = set(user.groups.values_list("name", flat=True))  # type: ignore[attr-defined]
    held = [role for role in Role if role.value in names]
    return max(held, key=_RANK.__getitem__, default=None)


def has_role(user: AbstractBaseUser | AnonymousUser, role: Role) -> bool:
    held = role_of(user)
    return held is not None and _RANK[held] >= _RANK[role]


def grant(user: AbstractBaseUser, role: Role) -> None:
    """Make ``role`` the user's only ASE role."""
    user.groups.remove(*Group.objects.filter(name__in=[r.value for r in Role]))  # type: ignore[attr-defined]
    group, _ = Group.objects.get_or_create(name=role.value)
    user.groups.add(group)  # type: ignore[attr-defined]
