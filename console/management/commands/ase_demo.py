"""``manage.py ase_demo``: the admin login and the demo service units for ``scripts/up.sh``.

Deploys two units pointing at the demo target (demo/target.py):
``OrderServiceAssured`` → ``/orders`` (acknowledges) and
``FaultyServiceAssured`` → ``/fault`` (answers a business fault, so its
requests land in the ``FaultyServiceAssured_fault`` area).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from console import operations

DESCRIPTOR = """<?xml version="1.0" encoding="UTF-8"?>
<jbi:jbi version="1.0" xmlns:jbi="http://java.sun.com/xml/ns/jbi"
    xmlns:petalsCDK="http://petals.ow2.org/components/extensions/version-5"
    xmlns:ase="http://petals.ow2.org/components/ase/version-1" xmlns:ord="http://example.org/orders">
  <jbi:services binding-component="false">
    <jbi:provides interface-name="ord:OrderInterface" service-name="ord:{service}" endpoint-name="{service}Endpoint">
      <ase:mustBeAutomaticallyStarted>true</ase:mustBeAutomaticallyStarted>
      <ase:stop-timeout>20</ase:stop-timeout>
    </jbi:provides>
    <jbi:consumes interface-name="ord:OrderInterface" service-name="ord:{target}" endpoint-name="{target}Endpoint">
      <petalsCDK:mep>InOnly</petalsCDK:mep>
      <petalsCDK:timeout>2000</petalsCDK:timeout>
      <ase:target-url>{url}</ase:target-url>
      <ase:mustBeAutomaticallyStarted>true</ase:mustBeAutomaticallyStarted>
      <ase:is-idempotent>true</ase:is-idempotent>
    </jbi:consumes>
  </jbi:services>
</jbi:jbi>
"""


class Command(BaseCommand):
    help = "Create the admin login and deploy the demo service units."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--target", default=f"http://127.0.0.1:{os.environ.get('ASE_DEMO_TARGET_PORT', '9000')}")

    def handle(self, *args: Any, **options: Any) -> None:
        password = self._admin_password()
        user_model = get_user_model()
        user, _ = user_model.objects.get_or_create(username="admin", defaults={"is_staff": True, "is_superuser": True})
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        target = options["target"].rstrip("/")
        for service, target_name, path in (
            ("OrderServiceAssured", "OrderService", "/orders"),
            ("FaultyServiceAssured", "FaultyService", "/fault"),
        ):
            descriptor = DESCRIPTOR.format(service=service, target=target_name, url=target + path)
            result = operations.deploy_descriptor(descriptor.encode(), "jbi.xml")
            self.stdout.write(f"deployed {service} -> {target + path} (queue {result.unit.queue_pending})")
        self.stdout.write(f"login: admin / {password}")

    def _admin_password(self) -> str:
        """ASE_ADMIN_PASSWORD, or one generated once and kept in the data folder."""
        if os.environ.get("ASE_ADMIN_PASSWORD"):
            return os.environ["ASE_ADMIN_PASSWORD"]
        path = Path(settings.DATA_DIR) / "admin-password"
        if path.exists():
            return path.read_text().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(12)
        path.write_text(password + "\n")
        path.chmod(0o600)
        return password
