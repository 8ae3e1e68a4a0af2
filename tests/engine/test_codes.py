"""The message-code catalog against the specification's three code tables."""

from __future__ import annotations

import logging
import string

import pytest

from ase_engine import codes

# The 47 codes of the specification's tables SE-ASE-ERRORS, SE-ASE-INFOS and SE-ASE-WARNS.
SPEC_CODES = (
    # errors (20)
    "SE-ASE-E0001",
    "SE-ASE-E0002",
    "SE-ASE-E0003",
    "SE-ASE-E0004",
    "SE-ASE-E0005",
    "SE-ASE-E0006",
    "SE-ASE-E0007",
    "SE-ASE-E0008",
    "SE-ASE-E0009",
    "SE-ASE-E0010",
    "SE-ASE-E0011",
    "SE-ASE-E0012",
    "SE-ASE-E0013",
    "SE-ASE-E0015",
    "SE-ASE-E0017",
    "SE-ASE-E0018",
    "SE-ASE-E0019",
    "SE-ASE-E0020",
    "SE-ASE-E0021",
    "SE-ASE-E0022",
    # information (4)
    "SE-ASE-I0001",
    "SE-ASE-I0002",
    "SE-ASE-I0003",
    "SE-ASE-I0004",
    # warnings (23)
    "SE-ASE-W0001",
    "SE-ASE-W0002",
    "SE-ASE-W0003",
    "SE-ASE-W0004",
    "SE-ASE-W0006",
    "SE-ASE-W0007",
    "SE-ASE-W0008",
    "SE-ASE-W0009",
    "SE-ASE-W0010",
    "SE-ASE-W0011",
    "SE-ASE-W0012",
    "SE-ASE-W0013",
    "SE-ASE-W0014",
    "SE-ASE-W0015",
    "SE-ASE-W0016",
    "SE-ASE-W0017",
    "SE-ASE-W0018",
    "SE-ASE-W0019",
    "SE-ASE-W0020",
    "SE-ASE-W0021",
    "SE-ASE-W0022",
    "SE-ASE-W0023",
    "SE-ASE-W0024",
)

LEVEL_BY_PREFIX = {"I": codes.Level.INFO, "W": codes.Level.WARNING, "E": codes.Level.ERROR}


def _number(code_id: str) -> int:
    return int(code_id[-4:])


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_the_spec_lists_47_distinct_codes() -> None:
    assert len(SPEC_CODES) == 47
    assert len(set(SPEC_CODES)) == 47
    assert codes.SPEC_CODE_COUNT == 47


def test_the_catalog_holds_exactly_the_spec_codes_below_1000() -> None:
    spec_range = {code_id for code_id in codes.CATALOG if _number(code_id) < 1000}
    assert spec_range == set(SPEC_CODES)


@pytest.mark.parametrize("code_id", SPEC_CODES)
def test_each_spec_code_has_the_level_of_its_prefix(code_id: str) -> None:
    code = codes.get(code_id)
    assert code.id == code_id
    assert code.level is LEVEL_BY_PREFIX[code_id[len("SE-ASE-")]]


@pytest.mark.parametrize("code_id", SPEC_CODES)
def test_each_template_renders_with_its_placeholders_and_leaves_none_unfilled(code_id: str) -> None:
    code = codes.get(code_id)
    params = {name: f"<{name}-value>" for name in _fields(code.template)}
    body = code.render(**params)
    assert body
    assert "{" not in body and "}" not in body
    for value in params.values():
        assert value in body


def test_a_duplicate_code_in_the_catalog_is_refused() -> None:
    code = codes.Code("SE-ASE-I0001", codes.Level.INFO, "x")
    with pytest.raises(ValueError, match="duplicate message code SE-ASE-I0001"):
        codes._catalog(code, code)


def test_public_text_is_level_code_and_message() -> None:
    assert codes.public("SE-ASE-E0010", mep="InOut") == (
        "ERROR SE-ASE-E0010: Only one-way request (InOnly or RobustInOnly) are supported. Received MEP: InOut."
    )


def test_public_text_of_a_warning_and_an_information_uses_their_level_names() -> None:
    assert (
        codes.public("SE-ASE-W0018")
        == "WARNING SE-ASE-W0018: The posting process is already started. Operation aborted."
    )
    assert codes.public("SE-ASE-I0001") == "INFO SE-ASE-I0001: The posting process is started."


def test_render_fills_a_value_containing_braces_literally() -> None:
    text = codes.render("SE-ASE-W0003", itf_consume="{urn:a}I", itf_provide="{urn:b}I")
    assert text.startswith("Interface name of both sections 'consume' ({urn:a}I) and 'provide' ({urn:b}I)")


@pytest.mark.parametrize(
    ("code_id", "params", "level"),
    [
        ("SE-ASE-I0002", {}, logging.INFO),
        ("SE-ASE-W0011", {"area": "orders_expired"}, logging.WARNING),
        ("SE-ASE-E0011", {"area": "orders", "reason": "broker down"}, logging.ERROR),
    ],
)
def test_log_uses_the_code_level_and_tags_the_record(
    caplog: pytest.LogCaptureFixture, code_id: str, params: dict[str, str], level: int
) -> None:
    logger = logging.getLogger("test.codes")
    with caplog.at_level(logging.DEBUG, logger="test.codes"):
        body = codes.log(logger, code_id, **params)
    [record] = caplog.records
    assert record.levelno == level
    assert record.getMessage() == f"{code_id}: {body}"
    assert record.ase_code == code_id  # type: ignore[attr-defined]
    assert body == codes.render(code_id, **params)


def test_log_inside_an_except_block_carries_no_stack_trace(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.codes.except")
    with caplog.at_level(logging.DEBUG, logger="test.codes.except"):
        try:
            raise ConnectionError("broker unreachable")
        except ConnectionError as exc:
            codes.log(logger, "SE-ASE-E0006", reason=str(exc))
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert not record.exc_info
    assert record.exc_text is None
    assert "Traceback" not in caplog.text
    assert "SE-ASE-E0006: An error occurs during the connection to the persistence service: broker unreachable." in (
        caplog.text
    )
