"""``manage.py ase ...``: the operations of the admin API for scripts (same functions, same audit).

    ase deploy <jbi.xml|su.zip>        deploy a service unit from its descriptor
    ase undeploy <service>             stop and forget a unit (its queues are kept)
    ase list                           units and their process states
    ase posting start|stop [--service S]
    ase sending start|stop [--service S]
    ase stop-unit <service> / ase start-unit <service>
    ase areas [--service S]            every area with its depth
    ase browse <service> <subtype> [--offset N] [--limit N]
    ase message <id>                   a message and its history (JSON)
    ase purge <service> <subtype> [--id ID ...] [--posted-before ISO] [--error-contains TEXT] [--background]
    ase recycle <service> <subtype> [--id ID ...] [--force] [...] [--background]
    ase job <id>                       a job's status and progress
    ase status                         broker connection, instances, processes, depths (JSON)
    ase component [--time-to-live N] [--stop-timeout N]
    ase grant <username> viewer|operator|admin
    ase token <username> [--renew]     the user's API token
    ase ingress-token <service> [--off]  require (and print) a token on a unit's ingress, or stop requiring it

Purge and recycle run in this process unless ``--background`` hands them to
the workers. Coded messages are printed as the API returns them (``WARNING
SE-ASE-W0018: ...``); the exit status is 1 on an error, 0 otherwise (warnings included).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.serializers.json import DjangoJSONEncoder

from ase_engine.config import ParameterError
from ase_engine.errors import AseError, BrokerUnavailable, DescriptorError
from console import accounts, areas, audit, jobs, monitoring, operations
from console.models import Job, ServiceUnit
from console.roles import Role, grant


class Command(BaseCommand):
    help = "Operate ASE: service units, processes, persistence areas, jobs, monitoring, users."

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
        p = sub.add_parser("areas", help="every area with its depth")
        p.add_argument("--service", default=None)
        p = sub.add_parser("browse", help="one page of an area's messages")
        p.add_argument("service")
        p.add_argument("subtype")
        p.add_argument("--offset", type=int, default=0)
        p.add_argument("--limit", type=int, default=50)
        p = sub.add_parser("message", help="a message and its history")
        p.add_argument("id")
        for name in ("purge", "recycle"):
            p = sub.add_parser(name, help=f"{name} messages of an area")
            p.add_argument("service")
            p.add_argument("subtype")
            p.add_argument("--id", action="append", dest="ids", default=None)
            p.add_argument("--posted-before", type=datetime.fromisoformat, default=None)
            p.add_argument("--error-contains", default=None)
            p.add_argument("--background", action="store_true", help="let the workers run it; print the job id")
            if name == "recycle":
                p.add_argument("--force", action="store_true", help="also to a non-idempotent target")
        p = sub.add_parser("job", help="a job's status and progress")
        p.add_argument("id", type=int)
        sub.add_parser("status", help="broker connection, instances, processes, depths")
        p = sub.add_parser("component", help="show or change the hot-updatable parameters")
        p.add_argument("--time-to-live", type=int, default=None)
        p.add_argument("--stop-timeout", type=int, default=None)
        p = sub.add_parser("grant", help="give a user a role")
        p.add_argument("username")
        p.add_argument("role", choices=[r.label for r in Role])
        p = sub.add_parser("ingress-token", help="require a token on a unit's ingress (prints it), or --off")
        p.add_argument("service")
        p.add_argument("--off", action="store_true")
        p = sub.add_parser("token", help="print a user's API token")
        p.add_argument("username")
        p.add_argument("--renew", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            getattr(self, f"do_{action.replace('-', '_')}")(options)
        except AseError as exc:
            if exc.code.level.name == "WARNING":
                self.stdout.write(exc.public)
                return
            raise CommandError(exc.public) from None
        except (
            DescriptorError,
            ParameterError,
            operations.UnknownService,
            operations.ConnectionParametersLocked,
            BrokerUnavailable,
            User.DoesNotExist,
            OSError,
        ) as exc:
            raise CommandError(str(exc) or type(exc).__name__) from None

    def _json(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, cls=DjangoJSONEncoder, indent=2))

    def _audited(self, name: str, parameters: dict[str, Any], call: Any) -> Any:
        try:
            result = call()
        except AseError as exc:
            audit.record(None, name, parameters, exc.public, succeeded=False)
            raise
        except Exception as exc:
            audit.record(None, name, parameters, f"{type(exc).__name__}: {exc}", succeeded=False)
            raise
        audit.record(None, name, parameters)
        return result

    # -- service units and processes ------------------------------------------------

    def do_deploy(self, options: dict[str, Any]) -> None:
        path: Path = options["descriptor"]
        data = path.read_bytes()
        result = self._audited(
            "service-unit.deploy-descriptor",
            {"filename": path.name, "bytes": len(data)},
            lambda: operations.deploy_descriptor(data, path.name),
        )
        for notice in result.notices:
            self.stdout.write(notice.public)
        verb = "deployed" if result.created else "redeployed"
        self.stdout.write(f"{verb} {result.unit.service} (queue {result.unit.queue_pending})")

    def do_undeploy(self, options: dict[str, Any]) -> None:
        service = options["service"]
        self._audited("service-unit.undeploy", {"service": service}, lambda: operations.undeploy(service))
        self.stdout.write(f"undeployed {service}; its queues are kept")

    def do_list(self, options: dict[str, Any]) -> None:
        for unit in ServiceUnit.objects.all():
            self.stdout.write(
                f"{unit.service}\tposting={'started' if unit.posting_started else 'stopped'}"
                f"\tsending={'started' if unit.sending_started else 'stopped'}\t{unit.target_url}"
            )

    def _process(self, process: str, options: dict[str, Any]) -> None:
        verb, service = options["verb"], options["service"]
        result = self._audited(
            f"{process}.{verb}", {"service": service}, lambda: operations.set_process(process, verb == "start", service)
        )
        self.stdout.write(f"{process} {verb}: {', '.join(result.services)}")
        for worker in result.workers:
            self.stdout.write(f"  {worker}")

    def do_posting(self, options: dict[str, Any]) -> None:
        self._process("posting", options)

    def do_sending(self, options: dict[str, Any]) -> None:
        self._process("sending", options)

    def do_stop_unit(self, options: dict[str, Any]) -> None:
        service = options["service"]
        result = self._audited("service-unit.stop", {"service": service}, lambda: operations.stop_unit(service))
        self.stdout.write(f"stopped {service}")
        for worker in result.workers:
            self.stdout.write(f"  {worker}")

    def do_start_unit(self, options: dict[str, Any]) -> None:
        service = options["service"]
        self._audited("service-unit.start", {"service": service}, lambda: operations.start_unit(service))
        self.stdout.write(f"started {service}")

    # -- areas and jobs -------------------------------------------------------------

    def do_areas(self, options: dict[str, Any]) -> None:
        for row in areas.list_areas(options["service"]):
            queues = ", ".join(f"{q['name']}={q['depth']}" for q in row["queues"])
            self.stdout.write(f"{row['service']}\t{row['subtype']}\t{row['depth']}\t{queues}")

    def do_browse(self, options: dict[str, Any]) -> None:
        self._json(areas.browse_area(options["service"], options["subtype"], options["offset"], options["limit"]))

    def do_message(self, options: dict[str, Any]) -> None:
        detail = areas.message_detail(options["id"])
        if detail is None:
            raise CommandError(f"No message '{options['id']}' in any area or in the history.")
        self._json(detail)

    def _area_job(self, kind: str, options: dict[str, Any]) -> None:
        service, subtype = options["service"], options["subtype"]
        selection = {
            "ids": options["ids"],
            "posted_before": options["posted_before"],
            "error_contains": options["error_contains"],
        }
        enqueue = options["background"]
        parameters = {
            "service": service,
            "subtype": subtype,
            **selection,
            "posted_before": str(options["posted_before"]),
        }
        if kind == "purge":
            job = self._audited(
                "area.purge", parameters, lambda: jobs.start_purge(None, service, subtype, enqueue=enqueue, **selection)
            )
        else:
            parameters["force"] = options["force"]
            job = self._audited(
                "area.recycle",
                parameters,
                lambda: jobs.start_recycle(
                    None, service, subtype, force=options["force"], enqueue=enqueue, **selection
                ),
            )
        if enqueue:
            self.stdout.write(f"job {job.pk} queued: ase job {job.pk}")
            return
        jobs.run_job(job.pk)
        self._print_job(Job.objects.get(pk=job.pk))

    def do_purge(self, options: dict[str, Any]) -> None:
        self._area_job("purge", options)

    def do_recycle(self, options: dict[str, Any]) -> None:
        self._area_job("recycle", options)

    def _print_job(self, job: Job) -> None:
        self.stdout.write(f"job {job.pk} {job.kind} {job.service}/{job.subtype}: {job.status}, {job.done}/{job.total}")
        if job.result.get("not_found"):
            self.stdout.write(f"  not found: {', '.join(job.result['not_found'])}")
        if job.status == Job.Status.FAILED:
            raise CommandError(job.error)

    def do_job(self, options: dict[str, Any]) -> None:
        job = Job.objects.filter(pk=options["id"]).first()
        if job is None:
            raise CommandError(f"No job {options['id']}.")
        self._print_job(job)

    # -- monitoring, configuration, users -------------------------------------------

    def do_status(self, options: dict[str, Any]) -> None:
        self._json(monitoring.status())

    def do_component(self, options: dict[str, Any]) -> None:
        values = {name: options[name] for name in ("time_to_live", "stop_timeout") if options[name] is not None}
        if values:
            config = self._audited("component.update", values, lambda: operations.update_component(**values))
        else:
            from console.component import component_config

            config = component_config()
        self.stdout.write(f"time-to-live={config.time_to_live} stop-timeout={config.stop_timeout}")

    def do_grant(self, options: dict[str, Any]) -> None:
        user = User.objects.get(username=options["username"])
        role = accounts.ROLES_BY_LABEL[options["role"]]
        self._audited("user.update", {"username": user.username, "role": role.label}, lambda: grant(user, role))
        self.stdout.write(f"{user.username} is now {role.label}")

    def do_ingress_token(self, options: dict[str, Any]) -> None:
        service = options["service"]
        if options["off"]:
            self._audited(
                "service-unit.ingress-token-remove",
                {"service": service},
                lambda: operations.clear_ingress_token(service),
            )
            self.stdout.write(f"{service}: no ingress token required")
            return
        token = self._audited(
            "service-unit.ingress-token", {"service": service}, lambda: operations.set_ingress_token(service)
        )
        self.stdout.write(token)

    def do_token(self, options: dict[str, Any]) -> None:
        self.stdout.write(accounts.token_for(options["username"], renew=options["renew"]))
