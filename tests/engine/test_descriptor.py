"""Reading Petals JBI service-unit descriptors (SE-ASE-PROC-000) and planning a deployment."""

from __future__ import annotations

import io
import zipfile

import pytest

from ase_engine import descriptor
from ase_engine.config import ComponentConfig, Notice, RetryPolicy
from ase_engine.descriptor import Descriptor, deploy_plan, parse_descriptor
from ase_engine.errors import DeploymentError, DescriptorError

# The example of DESIGN.md (long start tags wrapped), section "Service-unit descriptor (Petals JBI format)".
DESIGN_EXAMPLE = b"""<jbi:jbi version="1.0" xmlns:jbi="http://java.sun.com/xml/ns/jbi"
    xmlns:petalsCDK="http://petals.ow2.org/components/extensions/version-5"
    xmlns:ase="http://petals.ow2.org/components/ase/version-1" xmlns:ord="http://example.org/orders">
  <jbi:services binding-component="false">
    <jbi:provides interface-name="ord:OrderInterface" service-name="ord:OrderServiceAssured"
        endpoint-name="OrderServiceAssuredEndpoint">
      <ase:mustBeAutomaticallyStarted>true</ase:mustBeAutomaticallyStarted>
      <ase:stop-timeout>20</ase:stop-timeout>
    </jbi:provides>
    <jbi:consumes interface-name="ord:OrderInterface" service-name="ord:OrderService"
        endpoint-name="OrderServiceEndpoint">
      <petalsCDK:mep>InOnly</petalsCDK:mep>
      <petalsCDK:timeout>2000</petalsCDK:timeout>
      <ase:target-url>http://127.0.0.1:9000/orders</ase:target-url>
      <ase:mustBeAutomaticallyStarted>true</ase:mustBeAutomaticallyStarted>
      <ase:is-idempotent>true</ase:is-idempotent>
      <ase:retry-policy-number>3</ase:retry-policy-number>
      <ase:retry-policy-base-interval>1</ase:retry-policy-base-interval>
      <ase:retry-policy-factor>2</ase:retry-policy-factor>
      <ase:time-to-live>600</ase:time-to-live>
      <ase:persistence-area-name>orders_assured</ase:persistence-area-name>
    </jbi:consumes>
  </jbi:services>
</jbi:jbi>
"""

ORD = "{http://example.org/orders}"
COMPONENT = ComponentConfig()


def provides_section(service: str = "ord:OrderServiceAssured", itf: str = "ord:OrderInterface", body: str = "") -> str:
    return f'<jbi:provides interface-name="{itf}" service-name="{service}" endpoint-name="Ep">{body}</jbi:provides>'


def consumes_section(
    service: str = "ord:OrderService",
    itf: str = "ord:OrderInterface",
    url: str = "http://127.0.0.1:9000/orders",
    body: str = "",
) -> str:
    return (
        f'<jbi:consumes interface-name="{itf}" service-name="{service}" endpoint-name="TargetEp">'
        f"<ase:target-url>{url}</ase:target-url>{body}</jbi:consumes>"
    )


def jbi(*sections: str, cdk: str = "http://petals.ow2.org/components/extensions/version-5") -> bytes:
    """A descriptor with the given sections (default: one provides and one consumes)."""
    if not sections:
        sections = (provides_section(), consumes_section())
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<jbi:jbi version="1.0" xmlns:jbi="http://java.sun.com/xml/ns/jbi"'
        f' xmlns:petalsCDK="{cdk}"'
        ' xmlns:ase="http://petals.ow2.org/components/ase/version-1" xmlns:ord="http://example.org/orders">'
        f'<jbi:services binding-component="false">{"".join(sections)}</jbi:services></jbi:jbi>'
    ).encode()


def zipped(files: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def refused(data: bytes, filename: str | None = None) -> str:
    """The message of the DescriptorError raised for ``data``; checks it is one plain line."""
    with pytest.raises(DescriptorError) as caught:
        parse_descriptor(data, filename)
    message = str(caught.value)
    assert message
    assert "\n" not in message
    assert "Traceback" not in message
    assert caught.value.__cause__ is None
    return message


# -- the DESIGN.md example ----------------------------------------------------------


def test_the_design_example_parses_into_its_two_sections() -> None:
    parsed = parse_descriptor(DESIGN_EXAMPLE)
    assert parsed == Descriptor(
        su_name="OrderServiceAssured",
        provides={
            "interface-name": f"{ORD}OrderInterface",
            "service-name": f"{ORD}OrderServiceAssured",
            "endpoint-name": "OrderServiceAssuredEndpoint",
            "mustBeAutomaticallyStarted": "true",
            "stop-timeout": "20",
        },
        consumes={
            "interface-name": f"{ORD}OrderInterface",
            "service-name": f"{ORD}OrderService",
            "endpoint-name": "OrderServiceEndpoint",
            "mep": "InOnly",
            "timeout": "2000",
            "target-url": "http://127.0.0.1:9000/orders",
            "mustBeAutomaticallyStarted": "true",
            "is-idempotent": "true",
            "retry-policy-number": "3",
            "retry-policy-base-interval": "1",
            "retry-policy-factor": "2",
            "time-to-live": "600",
            "persistence-area-name": "orders_assured",
        },
        notices=[],
    )


def test_the_design_example_deploys_order_service_assured_on_queue_orders_assured() -> None:
    unit, notices = deploy_plan(DESIGN_EXAMPLE, "jbi.xml", COMPONENT)
    assert notices == []
    assert unit.name == "OrderServiceAssured"
    assert unit.service == "OrderServiceAssured"
    assert unit.areas.pending == "orders_assured"
    assert unit.areas.expired == "OrderServiceAssured_expired"
    assert unit.timeout_ms == 2000
    assert unit.is_idempotent is True
    assert unit.retry == RetryPolicy(number=3, base_interval=1, factor=2)
    assert unit.time_to_live == 600
    assert unit.stop_timeout == 20
    assert unit.mep == "InOnly"
    assert unit.target_url == "http://127.0.0.1:9000/orders"
    assert unit.target_service == "OrderService"
    assert unit.interface == f"{ORD}OrderInterface"
    assert unit.endpoint == "OrderServiceAssuredEndpoint"
    assert (unit.provides_auto_start, unit.consumes_auto_start) == (True, True)


# -- service-unit archives ----------------------------------------------------------


def test_a_zip_archive_with_meta_inf_jbi_xml_is_read_and_named_after_the_archive() -> None:
    archive = zipped({"META-INF/jbi.xml": DESIGN_EXAMPLE, "META-INF/MANIFEST.MF": b"Manifest-Version: 1.0\n"})
    unit, notices = deploy_plan(archive, "/uploads/su-ase-orders.zip", COMPONENT)
    assert notices == []
    assert unit.name == "su-ase-orders"
    assert unit.service == "OrderServiceAssured"
    assert unit.areas.pending == "orders_assured"


def test_a_stored_uncompressed_zip_archive_is_read_too() -> None:
    archive = zipped({"META-INF/jbi.xml": DESIGN_EXAMPLE}, zipfile.ZIP_STORED)
    assert parse_descriptor(archive, "su.zip").su_name == "su"


def test_a_zip_archive_without_a_file_name_is_named_after_its_ase_service() -> None:
    archive = zipped({"META-INF/jbi.xml": DESIGN_EXAMPLE})
    assert parse_descriptor(archive).su_name == "OrderServiceAssured"


def test_a_plain_descriptor_is_named_after_its_ase_service_whatever_its_file_name() -> None:
    assert parse_descriptor(DESIGN_EXAMPLE, "jbi.xml").su_name == "OrderServiceAssured"


@pytest.mark.parametrize("name", ["jbi.xml", "META-INF/JBI.XML", "other/META-INF/jbi.xml"])
def test_a_zip_archive_without_meta_inf_jbi_xml_is_refused(name: str) -> None:
    message = refused(zipped({name: DESIGN_EXAMPLE}), "su.zip")
    assert "META-INF/jbi.xml" in message


def test_a_zip_archive_whose_descriptor_is_over_1_mib_is_refused() -> None:
    padding = b"<!--" + b" " * (1024 * 1024) + b"-->"
    big = DESIGN_EXAMPLE.replace(b"<jbi:services", padding + b"<jbi:services", 1)
    archive = zipped({"META-INF/jbi.xml": big})
    assert len(archive) < 64 * 1024  # small archive, large member
    assert "larger than" in refused(archive, "bomb.zip")


def test_a_plain_descriptor_over_1_mib_is_refused() -> None:
    big = DESIGN_EXAMPLE.replace(b"<jbi:services", b"<!--" + b" " * (1024 * 1024) + b"--><jbi:services", 1)
    assert "larger than" in refused(big)


def test_a_truncated_zip_archive_is_refused() -> None:
    archive = zipped({"META-INF/jbi.xml": DESIGN_EXAMPLE})
    assert "archive" in refused(archive[:40], "broken.zip")


def test_a_zip_archive_holding_malformed_xml_is_refused_with_the_member_name() -> None:
    message = refused(zipped({"META-INF/jbi.xml": b"<jbi:jbi"}), "su.zip")
    assert message.startswith("su.zip!META-INF/jbi.xml: not well-formed XML")


# -- duplicated sections: W0001, W0002 ----------------------------------------------


def test_two_provides_sections_warn_w0001_and_use_the_first() -> None:
    data = jbi(provides_section("ord:First"), provides_section("ord:Second"), consumes_section())
    parsed = parse_descriptor(data)
    assert parsed.notices == [Notice("SE-ASE-W0001", {"su_name": "First"})]
    assert parsed.provides["service-name"] == f"{ORD}First"
    unit, notices = deploy_plan(data, None, COMPONENT)
    assert unit.service == "First"
    assert [n.code for n in notices] == ["SE-ASE-W0001"]


def test_two_consumes_sections_warn_w0002_and_use_the_first() -> None:
    data = jbi(
        provides_section(),
        consumes_section(url="http://first.example/x"),
        consumes_section(url="http://second.example/x"),
    )
    unit, notices = deploy_plan(data, "su-two.zip", COMPONENT)
    assert notices == [Notice("SE-ASE-W0002", {"su_name": "OrderServiceAssured"})]
    assert unit.target_url == "http://first.example/x"


def test_a_w0001_in_an_archive_names_the_archive() -> None:
    data = jbi(provides_section(), provides_section(), consumes_section())
    parsed = parse_descriptor(zipped({"META-INF/jbi.xml": data}), "su-dup.zip")
    assert parsed.notices == [Notice("SE-ASE-W0001", {"su_name": "su-dup"})]


# -- rules applied by deploy_plan: W0003, W0012, E0022 -------------------------------


def test_different_interface_names_warn_w0003_and_use_the_consumes_interface() -> None:
    data = jbi(provides_section(itf="ord:AssuredInterface"), consumes_section(itf="ord:OrderInterface"))
    unit, notices = deploy_plan(data, None, COMPONENT)
    assert notices == [
        Notice("SE-ASE-W0003", {"itf_consume": f"{ORD}OrderInterface", "itf_provide": f"{ORD}AssuredInterface"})
    ]
    assert unit.interface == f"{ORD}OrderInterface"


def test_same_interface_local_name_in_different_namespaces_still_warns_w0003() -> None:
    data = jbi(
        provides_section(itf="other:OrderInterface").replace(
            "<jbi:provides ", '<jbi:provides xmlns:other="urn:other" '
        ),
        consumes_section(),
    )
    _, notices = deploy_plan(data, None, COMPONENT)
    assert [n.code for n in notices] == ["SE-ASE-W0003"]


def test_a_queue_name_in_both_sections_with_the_same_value_warns_w0012() -> None:
    queue = "<ase:persistence-area-name-expired>late</ase:persistence-area-name-expired>"
    data = jbi(provides_section(body=queue), consumes_section(body=queue))
    unit, notices = deploy_plan(data, None, COMPONENT)
    assert notices == [Notice("SE-ASE-W0012", {"parameter": "persistence-area-name-expired"})]
    assert unit.areas.expired == "late"


def test_a_queue_name_in_both_sections_with_different_values_raises_e0022() -> None:
    data = jbi(
        provides_section(body="<ase:persistence-area-name>a</ase:persistence-area-name>"),
        consumes_section(body="<ase:persistence-area-name>b</ase:persistence-area-name>"),
    )
    with pytest.raises(DeploymentError) as caught:
        deploy_plan(data, None, COMPONENT)
    assert caught.value.code.id == "SE-ASE-E0022"
    assert caught.value.params == {"parameter": "persistence-area-name"}


def test_descriptor_notices_come_before_parameter_notices() -> None:
    data = jbi(
        provides_section(itf="ord:Other"),
        provides_section(),
        consumes_section(body="<ase:is-idempotent>perhaps</ase:is-idempotent>"),
    )
    _, notices = deploy_plan(data, None, COMPONENT)
    assert [n.code for n in notices] == ["SE-ASE-W0001", "SE-ASE-W0003", "SE-ASE-W0013"]


# -- namespaces and parameters -------------------------------------------------------


def test_a_prefix_declared_on_the_section_itself_is_resolved() -> None:
    section = '<jbi:provides xmlns:x="urn:local" service-name="x:Svc" interface-name="x:Itf" endpoint-name="E"/>'
    parsed = parse_descriptor(jbi(section, consumes_section()))
    assert parsed.provides["service-name"] == "{urn:local}Svc"
    assert parsed.provides["interface-name"] == "{urn:local}Itf"


def test_a_prefix_redeclared_on_a_section_shadows_the_document_one() -> None:
    section = provides_section().replace("<jbi:provides ", '<jbi:provides xmlns:ord="urn:shadow" ')
    parsed = parse_descriptor(jbi(section, consumes_section()))
    assert parsed.provides["service-name"] == "{urn:shadow}OrderServiceAssured"
    assert parsed.consumes["service-name"] == f"{ORD}OrderService"


def test_an_unprefixed_qname_takes_the_default_namespace_and_endpoint_names_stay_plain() -> None:
    section = '<jbi:provides xmlns="urn:default" service-name="Svc" interface-name="Itf" endpoint-name="Ep"/>'
    parsed = parse_descriptor(jbi(section, consumes_section()))
    assert parsed.provides["service-name"] == "{urn:default}Svc"
    assert parsed.provides["endpoint-name"] == "Ep"


def test_an_unprefixed_qname_without_default_namespace_is_kept_as_is() -> None:
    parsed = parse_descriptor(jbi(provides_section(service="Plain"), consumes_section()))
    assert parsed.provides["service-name"] == "Plain"
    assert parsed.su_name == "Plain"


def test_an_undeclared_qname_prefix_is_refused() -> None:
    message = refused(jbi(provides_section(service="nope:Svc"), consumes_section()))
    assert "'nope'" in message


def test_cdk_parameters_are_accepted_in_any_cdk_version_namespace() -> None:
    body = "<petalsCDK:timeout>1234</petalsCDK:timeout><petalsCDK:mep>RobustInOnly</petalsCDK:mep>"
    data = jbi(
        provides_section(), consumes_section(body=body), cdk="http://petals.ow2.org/components/extensions/version-6"
    )
    unit, _ = deploy_plan(data, None, COMPONENT)
    assert (unit.timeout_ms, unit.mep) == (1234, "RobustInOnly")


def test_parameters_in_the_wrong_or_an_unknown_namespace_are_ignored() -> None:
    body = (
        "<petalsCDK:is-idempotent>true</petalsCDK:is-idempotent>"  # an ASE parameter in the CDK namespace
        "<ase:timeout>5</ase:timeout>"  # a CDK parameter in the ASE namespace
        '<x:time-to-live xmlns:x="urn:elsewhere">5</x:time-to-live>'
        "<ase:unknown-parameter>1</ase:unknown-parameter>"
        "<time-to-live>5</time-to-live>"
    )
    parsed = parse_descriptor(jbi(provides_section(), consumes_section(body=body)))
    assert set(parsed.consumes) == {"interface-name", "service-name", "endpoint-name", "target-url"}


def test_parameter_values_are_trimmed_and_the_first_occurrence_wins() -> None:
    body = "<ase:time-to-live>\n  120 \n</ase:time-to-live><ase:time-to-live>5</ase:time-to-live>"
    parsed = parse_descriptor(jbi(provides_section(), consumes_section(body=body)))
    assert parsed.consumes["time-to-live"] == "120"


# -- refused documents --------------------------------------------------------------


def test_malformed_xml_is_refused_with_the_parser_line_and_column() -> None:
    message = refused(b'<jbi:jbi xmlns:jbi="http://java.sun.com/xml/ns/jbi">\n<jbi:services>\n</jbi:jbi>', "jbi.xml")
    assert message.startswith("jbi.xml: not well-formed XML (mismatched tag: line 3, column 2)")


@pytest.mark.parametrize("data", [b"", b"\x00\x01binary", b"plain text", b'<?xml version="1.0" encoding="nope"?><a/>'])
def test_input_that_is_not_xml_is_refused(data: bytes) -> None:
    refused(data)


def test_a_document_that_is_not_jbi_is_refused() -> None:
    assert "not a JBI descriptor" in refused(b'<jbi xmlns="urn:not-jbi"><services/></jbi>')


def test_a_descriptor_without_provides_section_is_refused() -> None:
    assert "'jbi:provides'" in refused(jbi(consumes_section()))


def test_a_descriptor_without_consumes_section_is_refused() -> None:
    assert "'jbi:consumes'" in refused(jbi(provides_section()))


def test_a_descriptor_without_services_element_is_refused() -> None:
    assert "'jbi:provides'" in refused(b'<jbi:jbi xmlns:jbi="http://java.sun.com/xml/ns/jbi" version="1.0"/>')


def _with_doctype(doctype: bytes, stop_timeout: str) -> bytes:
    """A valid descriptor preceded by ``doctype``, with ``stop_timeout`` as text of a parameter."""
    body = jbi(provides_section(body=f"<ase:stop-timeout>{stop_timeout}</ase:stop-timeout>"), consumes_section())
    declaration, rest = body.split(b"\n", 1)
    return declaration + b"\n" + doctype + b"\n" + rest


def test_a_billion_laughs_document_is_refused_without_expanding_entities() -> None:
    entities = [b'<!ENTITY lol0 "lol">']
    entities += [b'<!ENTITY lol%d "%s">' % (n, b"&lol%d;" % (n - 1) * 10) for n in range(1, 10)]
    doctype = b"<!DOCTYPE jbi:jbi [" + b"".join(entities) + b"]>"
    assert b'<!ENTITY lol9 "&lol8;&lol8;' in doctype
    message = refused(_with_doctype(doctype, "&lol9;"))
    assert "entity declarations are not allowed" in message


def test_an_external_entity_document_is_refused() -> None:
    xxe = _with_doctype(b'<!DOCTYPE jbi:jbi [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>', "&xxe;")
    assert "not allowed" in refused(xxe)


def test_deploy_plan_propagates_descriptor_errors() -> None:
    with pytest.raises(DescriptorError):
        deploy_plan(b"<not-closed", "jbi.xml", COMPONENT)


def test_the_descriptor_size_bound_is_one_mebibyte() -> None:
    assert descriptor.MAX_DESCRIPTOR_BYTES == 1024 * 1024
