"""``manage.py ase ...``: the operations of console.operations for scripts.

    ase deploy <jbi.xml|su.zip>        deploy a service unit from its descriptor
    ase undeploy <service>             stop and forget a unit (its queues are kept)
    ase list                           units and their process states
    ase posting start|stop [--service S]
    ase sending start|stop [--service S]
    ase stop-unit <service> / ase start-unit <service>

Coded messages are printed as the API returns them (``WARNING SE-ASE-W0018: ...``);
the exit status is 1 on an error, 0 otherwise (warnings included).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ase_engine.config import ParameterError
from ase_engine.errors import AseError, DescriptorError
from console import operations
from console.models import ServiceUnit


class Command(BaseCommand):
    help = "Operate ASE service units and their processes."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        deploy = sub.add_parser("deploy", help="deploy from a jbi.xml or service-unit zip")
        deploy.add_argument("descriptor", type=Path)
        undeploy = sub.add_parser("undeploy", help="stop and forget a service unit")
        undeploy.add_argument("service")
        sub.add_parser("list", help="service units and process states")
        for process in ("posting", "sending"):
            p = sub.add_parser(process, help=f"start or stop the {process} process")
            p.add_argument("verb", choices=["start", "stop"])
            p.add_argument("--service", default=None)
        for name in ("stop-unit", "start-unit"):
            p = sub.add_parser(name)
            p.add_argument("service")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "deploy":
                path: Path = options["descriptor"]
                result = operations.deploy_descriptor(path.read_bytes(), path.name)
                for notice in result.notices:
                    self.stdout.write(notice.public)
                verb = "deployed" if result.created else "redeployed"
                self.stdout.write(f"{verb} {result.unit.service} (queue {result.unit.queue_pending})")
            elif action == "undeploy":
                operations.undeploy(options["service"])
                self.stdout.write(f"undeployed {options['service']}; its queues are kept")
            elif action == "list":
                for unit in ServiceUnit.objects.all():
                    self.stdout.write(
                        f"{unit.service}\tposting={'started' if unit.posting_started else 'stopped'}"
                        f"\tsending={'started' if unit.sending_started else 'stopped'}\t{unit.target_url}"
                    )
            elif action in ("posting", "sending"):
                result = operations.set_process(action, options["verb"] == "start", options["service"])
                self.stdout.write(f"{action} {options['verb']}: {', '.join(result.services)}")
                for worker in result.workers:
                    self.stdout.write(f"  {worker}")
            elif action == "stop-unit":
                result = operations.stop_unit(options["service"])
                self.stdout.write(f"stopped {options['service']}")
                for worker in result.workers:
                    self.stdout.write(f"  {worker}")
            elif action == "start-unit":
                operations.start_unit(options["service"])
                self.stdout.write(f"started {options['service']}")
        except AseError as exc:
            if exc.code.level.name == "WARNING":
                self.stdout.write(exc.public)
                return
            raise CommandError(exc.public) from None
        except (DescriptorError, ParameterError, operations.UnknownService, OSError) as exc:
            raise CommandError(str(exc)) from None
