"""User management for admins: create a user with a role, change a role, (de)activate, API tokens."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from rest_framework.authtoken.models import Token

from console.roles import Role, grant

ROLES_BY_LABEL = {role.label: role for role in Role}


class UserExists(ValueError):
    pass


def create_user(username: str, password: str, role: str) -> User:
    with transaction.atomic():
        if User.objects.filter(username=username).exists():
            raise UserExists(f"A user '{username}' already exists.")
        user = User.objects.create_user(username, password=password)
        grant(user, ROLES_BY_LABEL[role])
    return user


def update_user(
    username: str, role: str | None = None, is_active: bool | None = None, password: str | None = None
) -> User:
    user = User.objects.get(username=username)
    with transaction.atomic():
        if role is not None:
            grant(user, ROLES_BY_LABEL[role])
        if is_active is not None:
            user.is_active = is_active
        if password is not None:
            user.set_password(password)
        user.save()
    return user


def token_for(username: str, renew: bool = False) -> str:
    """The user's API token (created on first use; ``renew`` replaces it)."""
    user = User.objects.get(username=username)
    if renew:
        Token.objects.filter(user=user).delete()
    token, _ = Token.objects.get_or_create(user=user)
    return str(token.key)
