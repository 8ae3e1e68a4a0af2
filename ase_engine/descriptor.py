"""Reading a Petals-style JBI service-unit descriptor (SE-ASE-PROC-000).

``parse_descriptor`` accepts a ``jbi.xml`` document or a service-unit archive
(a zip holding ``META-INF/jbi.xml``) and returns the raw text parameters of
the sections ``jbi:provides`` and ``jbi:consumes``, plus the notices of the
descriptor itself (W0001, W0002). ``deploy_plan`` then applies the
parameter rules of ``config.parse_service_unit``.

XML is parsed with defusedxml: entity declarations and external references
are refused, so a billion-laughs document raises ``DescriptorError``.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as DefusedET
from defusedxml import DefusedXmlException, DTDForbidden, EntitiesForbidden, ExternalReferenceForbidden

from ase_engine import config
from ase_engine.config import ComponentConfig, Notice, ServiceUnitConfig
from ase_engine.errors import DescriptorError

JBI_NS = "http://java.sun.com/xml/ns/jbi"
CDK_NS = "http://petals.ow2.org/components/extensions/version-5"
ASE_NS = "http://petals.ow2.org/components/ase/version-1"
_CDK_NS_RE = re.compile(r"^http://petals\.ow2\.org/components/extensions/version-\d+$")

ARCHIVE_DESCRIPTOR = "META-INF/jbi.xml"
MAX_DESCRIPTOR_BYTES = 1024 * 1024
_ZIP_MAGIC = b"PK\x03\x04"

# Section attributes whose value is a QName (resolved to ``{namespace}local``).
QNAME_ATTRIBUTES = ("interface-name", "service-name")
# ``endpoint-name`` is a plain name in JBI: kept as written.
TEXT_ATTRIBUTES = ("endpoint-name",)

CDK_PARAMETERS = frozenset({"timeout", "mep"})
ASE_PARAMETERS = frozenset(
    {
        "mustBeAutomaticallyStarted",
        "stop-timeout",
        "target-url",
        "is-idempotent",
        "retry-policy-number",
        "retry-policy-base-interval",
        "retry-policy-factor",
        "time-to-live",
        *config.PROTECTION_PARAMETERS,
        *config.QUEUE_PARAMETERS,
    }
)


@dataclass(frozen=True)
class Descriptor:
    """The two sections of a service-unit descriptor, as raw text parameters."""

    su_name: str
    provides: dict[str, str]
    consumes: dict[str, str]
    notices: list[Notice] = field(default_factory=list)


# -- reading the bytes -------------------------------------------------------------


def _display_name(filename: str | None) -> str:
    return filename or "jbi.xml"


def _base_name(filename: str | None) -> str:
    """``/path/to/su-orders.zip`` → ``su-orders``."""
    if not filename:
        return ""
    name = re.split(r"[\\/]", filename)[-1]
    stem, dot, _ext = name.rpartition(".")
    return stem if dot and stem else name


def _read_archive(data: bytes, filename: str | None) -> bytes:
    """The bytes of ``META-INF/jbi.xml`` in a service-unit archive, at most ``MAX_DESCRIPTOR_BYTES``."""
    where = _display_name(filename)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            try:
                info = archive.getinfo(ARCHIVE_DESCRIPTOR)
            except KeyError:
                raise DescriptorError(f"{where}: the archive has no {ARCHIVE_DESCRIPTOR}.") from None
            if info.file_size > MAX_DESCRIPTOR_BYTES:
                raise DescriptorError(_too_large(where))
            with archive.open(info) as member:
                # The declared size may lie: never read more than the bound plus one byte.
                content = member.read(MAX_DESCRIPTOR_BYTES + 1)
    except DescriptorError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise DescriptorError(f"{where}: not a valid service-unit archive ({exc}).") from None
    except (RuntimeError, NotImplementedError) as exc:  # encrypted member, unsupported compression
        raise DescriptorError(f"{where}: cannot read {ARCHIVE_DESCRIPTOR} in the archive ({exc}).") from None
    if len(content) > MAX_DESCRIPTOR_BYTES:
        raise DescriptorError(_too_large(where))
    return content


def _too_large(where: str) -> str:
    return f"{where}: the JBI descriptor is larger than {MAX_DESCRIPTOR_BYTES // 1024} KiB."


def _parse_xml(xml: bytes, where: str) -> tuple[Element, dict[int, dict[str, str]]]:
    """The root element and, per element id, the namespace prefixes in scope at that element."""
    scopes: dict[int, dict[str, str]] = {}
    stack: list[dict[str, str]] = [{}]
    pending: dict[str, str] = {}
    root: Element | None = None
    try:
        events: Iterator[tuple[str, object]] = DefusedET.iterparse(io.BytesIO(xml), events=("start-ns", "start", "end"))
        for event, item in events:
            if event == "start-ns":
                assert isinstance(item, tuple)
                prefix, uri = item
                pending[prefix] = uri
            elif event == "start":
                assert isinstance(item, Element)
                scope = {**stack[-1], **pending} if pending else stack[-1]
                pending = {}
                stack.append(scope)
                scopes[id(item)] = scope
                if root is None:
                    root = item
            else:
                stack.pop()
    except ParseError as exc:
        raise DescriptorError(f"{where}: not well-formed XML ({exc}).") from None
    except EntitiesForbidden:
        raise DescriptorError(f"{where}: entity declarations are not allowed in a JBI descriptor.") from None
    except DTDForbidden:
        raise DescriptorError(f"{where}: a document type declaration is not allowed in a JBI descriptor.") from None
    except ExternalReferenceForbidden:
        raise DescriptorError(f"{where}: external references are not allowed in a JBI descriptor.") from None
    except DefusedXmlException:
        raise DescriptorError(f"{where}: the XML uses a construct refused for safety.") from None
    except (LookupError, UnicodeError, ValueError) as exc:  # e.g. an unknown encoding declaration
        raise DescriptorError(f"{where}: cannot decode the XML ({exc}).") from None
    if root is None:  # pragma: no cover - expat reports an empty document as a ParseError
        raise DescriptorError(f"{where}: empty document.")
    return root, scopes


# -- reading the sections ----------------------------------------------------------


def _resolve_qname(value: str, scope: dict[str, str], attribute: str, where: str) -> str:
    """``prefix:Local`` → ``{namespace}Local`` using the prefixes in scope; unprefixed → default namespace."""
    value = value.strip()
    if not value:
        return ""
    prefix, colon, local = value.rpartition(":")
    if not colon:
        default = scope.get("", "")
        return f"{{{default}}}{value}" if default else value
    if prefix not in scope:
        raise DescriptorError(f"{where}: the prefix '{prefix}' of {attribute}=\"{value}\" is not declared.")
    return f"{{{scope[prefix]}}}{local}"


def _is_cdk(namespace: str) -> bool:
    return namespace == CDK_NS or bool(_CDK_NS_RE.match(namespace))


def _section(element: Element, scope: dict[str, str], where: str) -> dict[str, str]:
    """The section's attributes and its CDK/ASE parameters (first occurrence of each wins)."""
    values: dict[str, str] = {}
    for attribute in QNAME_ATTRIBUTES:
        raw = element.get(attribute)
        if raw is not None:
            values[attribute] = _resolve_qname(raw, scope, attribute, where)
    for attribute in TEXT_ATTRIBUTES:
        raw = element.get(attribute)
        if raw is not None:
            values[attribute] = raw.strip()
    for child in element:
        tag = child.tag
        if not isinstance(tag, str) or not tag.startswith("{"):
            continue
        namespace, local = tag[1:].split("}", 1)
        known = (namespace == ASE_NS and local in ASE_PARAMETERS) or (_is_cdk(namespace) and local in CDK_PARAMETERS)
        if known and local not in values:
            values[local] = (child.text or "").strip()
    return values


def parse_descriptor(data: bytes, filename: str | None = None) -> Descriptor:
    """Read a ``jbi.xml`` or a service-unit zip; raise ``DescriptorError`` when it is not usable."""
    where = _display_name(filename)
    is_archive = data[:4] == _ZIP_MAGIC
    if is_archive:
        xml = _read_archive(data, filename)
        where = f"{where}!{ARCHIVE_DESCRIPTOR}"
    else:
        if len(data) > MAX_DESCRIPTOR_BYTES:
            raise DescriptorError(_too_large(where))
        xml = data
    root, scopes = _parse_xml(xml, where)

    if root.tag != f"{{{JBI_NS}}}jbi":
        raise DescriptorError(f"{where}: not a JBI descriptor (root element is not {{{JBI_NS}}}jbi).")
    provides = root.findall(f"{{{JBI_NS}}}services/{{{JBI_NS}}}provides")
    consumes = root.findall(f"{{{JBI_NS}}}services/{{{JBI_NS}}}consumes")
    if not provides:
        raise DescriptorError(f"{where}: the JBI descriptor has no section 'jbi:provides' (the ASE service).")
    if not consumes:
        raise DescriptorError(f"{where}: the JBI descriptor has no section 'jbi:consumes' (the target service).")

    provides_values = _section(provides[0], scopes[id(provides[0])], where)
    consumes_values = _section(consumes[0], scopes[id(consumes[0])], where)

    su_name = _base_name(filename) if is_archive else ""
    if not su_name:
        su_name = config.local_part(provides_values.get("service-name", ""))
    if not su_name:
        su_name = _base_name(filename)

    notices: list[Notice] = []
    if len(provides) > 1:
        notices.append(Notice("SE-ASE-W0001", {"su_name": su_name}))
    if len(consumes) > 1:
        notices.append(Notice("SE-ASE-W0002", {"su_name": su_name}))
    return Descriptor(su_name=su_name, provides=provides_values, consumes=consumes_values, notices=notices)


def deploy_plan(
    data: bytes, filename: str | None, component: ComponentConfig
) -> tuple[ServiceUnitConfig, list[Notice]]:
    """Parse a descriptor and apply the service-unit rules; descriptor notices come first.

    Raises ``DescriptorError``, ``DeploymentError`` (E0022, E0001) or ``config.ParameterError``.
    """
    descriptor = parse_descriptor(data, filename)
    unit, notices = config.parse_service_unit(descriptor.su_name, descriptor.provides, descriptor.consumes, component)
    return unit, [*descriptor.notices, *notices]
