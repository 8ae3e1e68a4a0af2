"""Classification of a target's answer (DESIGN.md, "Classification of the target's answer")."""

from __future__ import annotations

import pytest

from ase_engine.target import Outcome, classify

SOAP_FAULT = (
    b'<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><soap:Body>'
    b"<soap:Fault><faultcode>soap:Server</faultcode></soap:Fault></soap:Body></soap:Envelope>"
)


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_2xx_is_an_acknowledgement(status: int) -> None:
    assert classify(status, "application/json", b"{}") is Outcome.ACK


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422, 499])
def test_4xx_is_a_business_fault(status: int) -> None:
    assert classify(status, "application/json", b"{}") is Outcome.FAULT


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 301, 302])
def test_5xx_408_429_and_redirects_are_technical_errors(status: int) -> None:
    assert classify(status, "text/plain", b"") is Outcome.ERROR


def test_a_soap_fault_is_a_fault_even_in_a_500() -> None:
    assert classify(500, "text/xml; charset=utf-8", SOAP_FAULT) is Outcome.FAULT


def test_a_500_with_xml_that_is_not_a_soap_fault_is_an_error() -> None:
    assert classify(500, "application/xml", b"<error>db down</error>") is Outcome.ERROR


def test_a_fault_element_in_a_non_xml_answer_does_not_count() -> None:
    assert classify(500, "text/plain", SOAP_FAULT) is Outcome.ERROR
