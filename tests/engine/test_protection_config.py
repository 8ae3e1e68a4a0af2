"""The service-unit parameters of ours for target protection and ordered delivery (issue 7)."""

from __future__ import annotations

import pytest

from ase_engine.config import ParameterError
from ase_engine.descriptor import deploy_plan
from tests.engine.test_config import consumes, parse
from tests.engine.test_descriptor import COMPONENT, consumes_section, jbi, provides_section


def test_protection_and_ordering_are_off_by_default() -> None:
    unit, _ = parse()

    assert (unit.breaker_threshold, unit.breaker_cooldown, unit.rate_limit) == (0, 30, 0.0)
    assert (unit.ordered_groups, unit.group_blocked) == (False, "wait")


def test_the_descriptor_sets_breaker_rate_limit_and_ordered_groups_in_the_ase_namespace() -> None:
    body = (
        "<ase:circuit-breaker-threshold>5</ase:circuit-breaker-threshold>"
        "<ase:circuit-breaker-cooldown>12</ase:circuit-breaker-cooldown>"
        "<ase:rate-limit>2.5</ase:rate-limit>"
        "<ase:ordered-groups>true</ase:ordered-groups>"
        "<ase:ordered-group-blocked>skip</ase:ordered-group-blocked>"
    )
    unit, _ = deploy_plan(jbi(provides_section(), consumes_section(body=body)), None, COMPONENT)

    assert (unit.breaker_threshold, unit.breaker_cooldown, unit.rate_limit) == (5, 12, 2.5)
    assert (unit.ordered_groups, unit.group_blocked) == (True, "skip")


@pytest.mark.parametrize(
    "parameter, value",
    [
        ("circuit-breaker-threshold", "-1"),
        ("circuit-breaker-threshold", "many"),
        ("circuit-breaker-cooldown", "0"),
        ("rate-limit", "-3"),
        ("rate-limit", "fast"),
        ("rate-limit", "inf"),
        ("ordered-groups", "perhaps"),
        ("ordered-group-blocked", "drop"),
    ],
)
def test_an_unusable_protection_parameter_is_refused_naming_it(parameter: str, value: str) -> None:
    with pytest.raises(ParameterError, match=parameter):
        parse(consumes_section=consumes(**{parameter: value}))
