"""Roles: viewer < operator < admin, kept as Django groups; a superuser is an admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User

from console.roles import Role, grant, has_role, role_of

pytestmark = pytest.mark.django_db


def test_operator_has_viewer_rights_but_not_admin_rights() -> None:
    user = User.objects.create_user("op")
    grant(user, Role.OPERATOR)
    assert role_of(user) == Role.OPERATOR
    assert has_role(user, Role.VIEWER)
    assert has_role(user, Role.OPERATOR)
    assert not has_role(user, Role.ADMIN)


def test_grant_replaces_the_previous_role() -> None:
    user = User.objects.create_user("demoted")
    grant(user, Role.ADMIN)
    grant(user, Role.VIEWER)
    assert role_of(user) == Role.VIEWER
    assert not has_role(user, Role.OPERATOR)


def test_user_without_group_anonymous_and_inactive_have_no_role() -> None:
    inactive = User.objects.create_user("gone", is_active=False)
    grant(inactive, Role.ADMIN)
    for user in (User.objects.create_user("nobody"), AnonymousUser(), inactive):
        assert role_of(user) is None
        assert not has_role(user, Role.VIEWER)


def test_superuser_is_admin() -> None:
    assert has_role(User.objects.create_superuser("root"), Role.ADMIN)
