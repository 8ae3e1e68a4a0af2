"""Area identification and message selection (ase_engine/areas.py), without a broker."""

from __future__ import annotations

import pytest

from ase_engine.areas import Selection, check_subtype, queues_of, subtype_of_queue
from ase_engine.config import QueueNames, RetryPolicy, ServiceUnitConfig
from ase_engine.errors import AreaError


def unit(**overrides) -> ServiceUnitConfig:  # type: ignore[no-untyped-def]
    return ServiceUnitConfig(name="Orders", service="Orders", target_url="http://t/", **overrides)


def test_subtypes_are_case_insensitive_and_retry_is_accepted():
    assert check_subtype("Orders", "fault") == "FAULT"
    assert check_subtype("Orders", " Retry ") == "RETRY"


def test_an_unknown_subtype_is_e0021_naming_the_area():
    with pytest.raises(AreaError) as error:
        check_subtype("Orders", "DLQ")

    assert error.value.code.id == "SE-ASE-E0021"
    assert "'Orders/DLQ'" in error.value.public


def test_all_is_every_queue_once_even_when_areas_share_a_queue():
    shared = QueueNames("orders", "orders_parked", "orders_parked", "orders_parked", "orders_fault")
    config = unit(queues=shared, is_idempotent=True, retry=RetryPolicy(2, 1, 1))

    assert queues_of(config, "ALL") == ["orders", "orders_parked", "orders_fault", "orders_retry_1", "orders_retry_2"]
    assert queues_of(config, "RETRY") == ["orders_retry_1", "orders_retry_2"]
    assert subtype_of_queue(config, "orders_parked") == "EXPIRED"


def test_a_non_idempotent_unit_has_no_retry_queues():
    assert queues_of(unit(), "RETRY") == []


def test_selection_by_ids_time_and_error_text():
    headers = {"ase-id": "a", "ase-incoming-timestamp": "1000", "ase-last-error": "Connection REFUSED"}

    assert Selection().everything and Selection().matches(headers)
    assert Selection(ids=frozenset({"a"})).matches(headers)
    assert not Selection(ids=frozenset({"b"})).matches(headers)
    assert Selection(posted_before_ms=1001).matches(headers)
    assert not Selection(posted_before_ms=1000).matches(headers)
    assert Selection(error_contains="refused").matches(headers)
    assert not Selection(error_contains="refused", ids=frozenset({"b"})).matches(headers)
    assert not Selection(posted_before_ms=5).matches({"ase-id": "x"})
