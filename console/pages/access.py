"""Who may see and do what in the console: every view names its role; nothing else decides.

A page needs at least the viewer role; an action names the role it needs
(operator: start/stop, purge, recycle; admin: deploy, undeploy, component).
Templates get ``can_operate`` / ``can_administer`` to hide what the user may
not do, and the view refuses it anyway (403) when a forged request arrives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.roles import Role, has_role, role_of

View = Callable[..., HttpResponse]


def require(role: Role) -> Callable[[View], View]:
    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not has_role(request.user, role):
                return forbidden(request, role)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def forbidden(request: HttpRequest, role: Role) -> HttpResponse:
    return render(request, "console/forbidden.html", {"needed": role.label}, status=403)


def roles(request: HttpRequest) -> dict[str, Any]:
    """Template context: the user's role and what it allows."""
    user = getattr(request, "user", None)
    if user is None:
        return {}
    role = role_of(user)
    return {
        "ase_role": role.label if role else "",
        "can_operate": has_role(user, Role.OPERATOR),
        "can_administer": has_role(user, Role.ADMIN),
    }
