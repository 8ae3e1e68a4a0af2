"""Deploying and undeploying service units (SE-ASE-PROC-000, PROC-005, PROC-055) on the real broker."""

from __future__ import annotations

import io
import logging
import zipfile

import pytest
from django.core.management import CommandError, call_command

from ase_engine.errors import DeploymentError, ProcessStateError
from console import operations
from console.component import installed_component
from console.models import ServiceUnit

pytestmark = pytest.mark.broker

DESCRIPTOR = """<?xml version="1.0"?>
<jbi:jbi version="1.0" xmlns:jbi="http://java.sun.com/xml/ns/jbi"
    xmlns:petalsCDK="http://petals.ow2.org/components/extensions/version-5"
    xmlns:ase="http://petals.ow2.org/components/ase/version-1" xmlns:ord="http://example.org/orders">
  <jbi:services binding-component="false">
    <jbi:provides interface-name="ord:{provides_itf}" service-name="ord:{service}" endpoint-name="Ep">
      <ase:mustBeAutomaticallyStarted>true</ase:mustBeAutomaticallyStarted>
      {provides_extra}
    </jbi:provides>
    <jbi:consumes interface-name="ord:OrderInterface" service-name="ord:OrderService" endpoint-name="OrderEp">
      <petalsCDK:mep>InOnly</petalsCDK:mep>
      <petalsCDK:timeout>2000</petalsCDK:timeout>
      <ase:target-url>http://127.0.0.1:9000/orders</ase:target-url>
      <ase:mustBeAutomaticallyStarted>{consumes_start}</ase:mustBeAutomaticallyStarted>
      <ase:is-idempotent>true</ase:is-idempotent>
      {consumes_extra}
    </jbi:consumes>
  </jbi:services>
</jbi:jbi>
"""


def descriptor(
    service: str,
    provides_itf: str = "OrderInterface",
    provides_extra: str = "",
    consumes_extra: str = "",
    consumes_start: str = "true",
) -> bytes:
    return DESCRIPTOR.format(
        service=service,
        provides_itf=provides_itf,
        provides_extra=provides_extra,
        consumes_extra=consumes_extra,
        consumes_start=consumes_start,
    ).encode()


def test_deploy_creates_every_queue_of_the_persistence_area(broker, transactional_db, service_name):
    result = operations.deploy_descriptor(descriptor(service_name), "jbi.xml")

    assert result.created
    queues = [
        service_name,
        f"{service_name}_expired",
        f"{service_name}_timedout",
        f"{service_name}_error",
        f"{service_name}_fault",
    ]
    conn = broker.connection()
    stats = conn.queue_stats(queues)
    conn.disconnect()
    assert {name: s is not None and s["size"] == 0 for name, s in stats.items()} == dict.fromkeys(queues, True)
    unit = ServiceUnit.objects.get(service=service_name)
    assert (unit.posting_started, unit.sending_started, unit.is_idempotent, unit.timeout_ms) == (True, True, True, 2000)


def test_deploying_twice_keeps_the_queues_and_their_messages(broker, transactional_db, service_name, ingress):
    operations.deploy_descriptor(descriptor(service_name, consumes_start="false"), "jbi.xml")
    assert ingress.post(service_name, b"{}").status_code == 202

    result = operations.deploy_descriptor(descriptor(service_name, consumes_start="false"), "jbi.xml")

    assert not result.created
    assert broker.depth(service_name) == 1


def test_deploy_from_a_service_unit_archive(broker, transactional_db, service_name):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("META-INF/jbi.xml", descriptor(service_name))

    result = operations.deploy_descriptor(archive.getvalue(), "su-orders.zip")

    assert result.unit.service == service_name
    assert result.unit.name == "su-orders"


def test_deploy_logs_the_descriptor_warnings_w0003_w0012(broker, transactional_db, service_name, caplog):
    queue = f"<ase:persistence-area-name>{service_name}_q</ase:persistence-area-name>"

    with caplog.at_level(logging.INFO):
        result = operations.deploy_descriptor(
            descriptor(service_name, provides_itf="OtherInterface", provides_extra=queue, consumes_extra=queue),
            "jbi.xml",
        )

    assert [n.code for n in result.notices] == ["SE-ASE-W0003", "SE-ASE-W0012"]
    logged = {getattr(r, "ase_code", None): r for r in caplog.records}
    assert logged["SE-ASE-W0003"].levelno == logging.WARNING
    assert logged["SE-ASE-W0012"].levelno == logging.WARNING
    assert result.unit.queue_pending == f"{service_name}_q"
    assert result.unit.interface.endswith("OrderInterface")


def test_conflicting_queue_names_abort_the_deployment_with_e0022(broker, transactional_db, service_name):
    with pytest.raises(DeploymentError) as error:
        operations.deploy_descriptor(
            descriptor(
                service_name,
                provides_extra="<ase:persistence-area-name>a</ase:persistence-area-name>",
                consumes_extra="<ase:persistence-area-name>b</ase:persistence-area-name>",
            ),
            "jbi.xml",
        )

    assert error.value.public == (
        "ERROR SE-ASE-E0022: The parameter 'persistence-area-name' is defined twice with different values in both "
        "sections 'consumes' and 'provides' of the JBI service unit descriptor. It should be declared once."
    )
    assert not ServiceUnit.objects.filter(service=service_name).exists()


def test_unreachable_broker_aborts_the_deployment_with_e0001(transactional_db, service_name, settings, caplog):
    settings.ASE_COMPONENT = {**settings.ASE_COMPONENT, "broker-url": "127.0.0.1:9"}
    installed_component.cache_clear()
    try:
        with caplog.at_level(logging.INFO), pytest.raises(DeploymentError) as error:
            operations.deploy_descriptor(descriptor(service_name), "jbi.xml")
    finally:
        installed_component.cache_clear()

    assert error.value.code.id == "SE-ASE-E0001"
    assert error.value.public.startswith(
        f"ERROR SE-ASE-E0001: An error occurs creating the persistence area '{service_name}': "
    )
    assert not ServiceUnit.objects.filter(service=service_name).exists()
    assert [r for r in caplog.records if getattr(r, "ase_code", "") == "SE-ASE-E0001"][0].exc_info is not True


def test_undeploy_keeps_the_queues_and_their_messages(broker, transactional_db, service_name, ingress):
    operations.deploy_descriptor(descriptor(service_name, consumes_start="false"), "jbi.xml")
    assert ingress.post(service_name, b"{}").status_code == 202

    operations.undeploy(service_name)

    assert not ServiceUnit.objects.filter(service=service_name).exists()
    assert broker.depth(service_name) == 1
    assert broker.depth(f"{service_name}_fault") == 0
    assert ingress.post(service_name, b"{}").status_code == 404


def test_mustbeautomaticallystarted_false_leaves_processes_stopped(broker, transactional_db, service_name):
    xml = descriptor(service_name, consumes_start="false").replace(
        b"<ase:mustBeAutomaticallyStarted>true</ase:mustBeAutomaticallyStarted>",
        b"<ase:mustBeAutomaticallyStarted>false</ase:mustBeAutomaticallyStarted>",
        1,
    )

    unit = operations.deploy_descriptor(xml, "jbi.xml").unit

    assert (unit.posting_started, unit.sending_started) == (False, False)


def test_non_boolean_autostart_warns_w0017_and_starts(broker, transactional_db, service_name):
    result = operations.deploy_descriptor(descriptor(service_name, consumes_start="yes"), "jbi.xml")

    assert [n.code for n in result.notices] == ["SE-ASE-W0017"]
    assert result.unit.sending_started is True


@pytest.mark.parametrize(
    ("process", "start", "code"),
    [
        ("posting", True, "SE-ASE-W0018"),
        ("posting", False, "SE-ASE-W0019"),
        ("sending", False, "SE-ASE-W0020"),
        ("sending", True, "SE-ASE-W0021"),
    ],
)
def test_starting_or_stopping_twice_is_refused_with_its_warning(
    broker, transactional_db, service_name, process, start, code
):
    operations.deploy_descriptor(descriptor(service_name), "jbi.xml")
    if not start:
        operations.set_process(process, False, service_name)

    with pytest.raises(ProcessStateError) as already:
        operations.set_process(process, start, service_name)

    assert already.value.public.startswith(f"WARNING {code}: The {process} process is already ")


def test_posting_start_and_stop_log_i0001_and_i0003(broker, transactional_db, service_name, caplog):
    operations.deploy_descriptor(descriptor(service_name), "jbi.xml")
    caplog.clear()

    with caplog.at_level(logging.INFO):
        operations.set_process("posting", False, service_name)
        operations.set_process("posting", True, service_name)

    codes = [getattr(r, "ase_code", None) for r in caplog.records if getattr(r, "ase_code", None)]
    assert codes == ["SE-ASE-I0003", "SE-ASE-I0001"]


def test_unknown_service_is_refused(broker, transactional_db):
    with pytest.raises(operations.UnknownService):
        operations.set_process("posting", False, "NoSuchService")


def test_management_command_deploys_lists_and_stops(broker, transactional_db, service_name, tmp_path, capsys):
    path = tmp_path / "jbi.xml"
    path.write_bytes(descriptor(service_name, provides_itf="OtherInterface"))

    call_command("ase", "deploy", str(path))
    call_command("ase", "posting", "stop", "--service", service_name)
    call_command("ase", "posting", "stop", "--service", service_name)
    call_command("ase", "list")

    out = capsys.readouterr().out
    assert "WARNING SE-ASE-W0003: " in out
    assert f"deployed {service_name}" in out
    assert "WARNING SE-ASE-W0019: The posting process is already stopped. Operation aborted." in out
    assert f"{service_name}\tposting=stopped\tsending=started" in out


def test_management_command_reports_errors_without_a_traceback(broker, transactional_db, tmp_path):
    path = tmp_path / "jbi.xml"
    path.write_bytes(b"<not-jbi/>")

    with pytest.raises(CommandError) as error:
        call_command("ase", "deploy", str(path))

    assert "Traceback" not in str(error.value)
