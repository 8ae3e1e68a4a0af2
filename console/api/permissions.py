"""Who may call what: reading needs the viewer role; each view names the role its other methods need."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from console.roles import Role, has_role


class ViewerReadsOthersNeedRole(BasePermission):
    """GET/HEAD/OPTIONS: viewer. Other methods: the view's ``write_role`` (admin unless it says otherwise)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            needed = getattr(view, "read_role", Role.VIEWER)
        else:
            needed = getattr(view, "write_role", Role.ADMIN)
        return has_role(request.user, needed)
