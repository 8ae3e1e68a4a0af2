"""Component and service-unit parameter rules (SE-ASE-000, CFG-005/010, PROC-000/005/026/027)."""

from __future__ import annotations

from typing import Any

import pytest

from ase_engine import config
from ase_engine.config import ComponentConfig, Notice, ParameterError, QueueNames, RetryPolicy
from ase_engine.errors import ConfigurationError, DeploymentError

# -- helpers ------------------------------------------------------------------------


def component_params(**overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "broker-transport": "stomp",
        "broker-url": "127.0.0.1:61613",
        "broker-vhost": "localhost",
    }
    params.update({key.replace("_", "-"): value for key, value in overrides.items()})
    return params


def provides(**params: str) -> dict[str, str]:
    section = {"service-name": "{http://example.org/orders}OrderServiceAssured"}
    section.update(params)
    return section


def consumes(**params: str) -> dict[str, str]:
    section = {"service-name": "{http://example.org/orders}OrderService", "target-url": "http://127.0.0.1:9000/orders"}
    section.update(params)
    return section


def parse(
    provides_section: dict[str, str] | None = None,
    consumes_section: dict[str, str] | None = None,
    component: ComponentConfig | None = None,
    su_name: str = "su-orders",
) -> tuple[config.ServiceUnitConfig, list[Notice]]:
    return config.parse_service_unit(
        su_name,
        provides() if provides_section is None else provides_section,
        consumes() if consumes_section is None else consumes_section,
        component,
    )


def codes_of(notices: list[Notice]) -> list[str]:
    return [notice.code for notice in notices]


# -- value parsers ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, (True, True)),
        ("", (True, True)),
        ("true", (True, True)),
        (" FALSE ", (False, True)),
        (False, (False, True)),
        ("yes", (True, False)),
        ("1", (True, False)),
    ],
)
def test_parse_bool_accepts_true_or_false_and_flags_anything_else(raw: Any, expected: tuple[bool, bool]) -> None:
    assert config.parse_bool(raw, True) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, (7, True)),
        ("", (7, True)),
        ("42", (42, True)),
        (" 0 ", (0, True)),
        (5, (5, True)),
        ("-1", (7, False)),
        ("1.5", (7, False)),
        ("ten", (7, False)),
        (True, (7, False)),
        (-3, (7, False)),
    ],
)
def test_parse_int_accepts_non_negative_integers_only(raw: Any, expected: tuple[int, bool]) -> None:
    assert config.parse_int(raw, 7) == expected


@pytest.mark.parametrize(
    ("qname", "local"),
    [("{urn:x}Svc", "Svc"), ("p:Svc", "Svc"), ("Svc", "Svc"), ("", "")],
)
def test_local_part_drops_the_namespace_or_the_prefix(qname: str, local: str) -> None:
    assert config.local_part(qname) == local


# -- component ----------------------------------------------------------------------


def test_a_complete_component_configuration_parses_without_notices() -> None:
    component, notices = config.parse_component(
        component_params(
            broker_url="mq1:61613, mq2:61614",
            broker_login="ase",
            broker_passcode="secret",
            stop_timeout="20",
            time_to_live="3600",
            receipt_timeout="2.5",
        )
    )
    assert notices == []
    assert component.broker_transport == "stomp"
    assert component.hosts == [("mq1", 61613), ("mq2", 61614)]
    assert component.broker_vhost == "localhost"
    assert (component.broker_login, component.broker_passcode) == ("ase", "secret")
    assert (component.stop_timeout, component.time_to_live, component.receipt_timeout) == (20, 3600, 2.5)


def test_component_runtime_parameters_default_to_60_seconds_stop_timeout_and_infinite_ttl() -> None:
    component, notices = config.parse_component(component_params())
    assert notices == []
    assert (component.stop_timeout, component.time_to_live, component.receipt_timeout) == (60, 0, 10.0)


@pytest.mark.parametrize("transport", [None, "", "   "])
def test_a_missing_broker_transport_raises_e0002(transport: str | None) -> None:
    with pytest.raises(ConfigurationError) as caught:
        config.parse_component(component_params(broker_transport=transport))
    assert caught.value.code.id == "SE-ASE-E0002"


def test_an_unsupported_broker_transport_raises_e0003_naming_it() -> None:
    with pytest.raises(ConfigurationError) as caught:
        config.parse_component(component_params(broker_transport="openwire"))
    assert caught.value.code.id == "SE-ASE-E0003"
    assert caught.value.public == "ERROR SE-ASE-E0003: Broker transport not supported: openwire."


@pytest.mark.parametrize("url", [None, "", "  "])
def test_a_missing_broker_url_raises_e0004(url: str | None) -> None:
    with pytest.raises(ConfigurationError) as caught:
        config.parse_component(component_params(broker_url=url))
    assert caught.value.code.id == "SE-ASE-E0004"


@pytest.mark.parametrize("vhost", [None, ""])
def test_a_missing_broker_vhost_raises_e0005(vhost: str | None) -> None:
    with pytest.raises(ConfigurationError) as caught:
        config.parse_component(component_params(broker_vhost=vhost))
    assert caught.value.code.id == "SE-ASE-E0005"


@pytest.mark.parametrize(
    "url", ["tcp://mq:61613", "mq", "mq:", "mq:0", "mq:65536", "mq:99999", "mq:61613,", "mq 1:61613", ":61613"]
)
def test_a_malformed_broker_url_raises_e0015(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        config.parse_component(component_params(broker_url=url))
    assert caught.value.code.id == "SE-ASE-E0015"


def test_a_bracketed_ipv6_broker_address_is_accepted() -> None:
    assert config.parse_broker_url("[::1]:61613") == [("::1", 61613)]


def test_an_invalid_component_ttl_warns_w0014_and_uses_the_default() -> None:
    component, notices = config.parse_component(component_params(time_to_live="soon"))
    assert notices == [Notice("SE-ASE-W0014", {"value": "soon", "default": 0})]
    assert component.time_to_live == 0


def test_an_invalid_component_stop_timeout_warns_w0015_and_uses_the_default() -> None:
    component, notices = config.parse_component(component_params(stop_timeout="-5"))
    assert notices == [Notice("SE-ASE-W0015", {"value": "-5", "default": 60})]
    assert component.stop_timeout == 60


@pytest.mark.parametrize("receipt", ["abc", "0", "-1", "nan", "inf"])
def test_a_receipt_timeout_that_is_not_a_positive_finite_number_raises_parameter_error(receipt: str) -> None:
    with pytest.raises(ParameterError, match="receipt-timeout"):
        config.parse_component(component_params(receipt_timeout=receipt))


def test_with_runtime_hot_updates_only_the_given_runtime_parameters() -> None:
    component = ComponentConfig(stop_timeout=30, time_to_live=100)
    assert component.with_runtime(time_to_live=5) == ComponentConfig(stop_timeout=30, time_to_live=5)
    assert component.with_runtime(stop_timeout=0) == ComponentConfig(stop_timeout=0, time_to_live=100)
    assert component.with_runtime() == component


# -- service unit: identity and defaults --------------------------------------------


def test_a_minimal_service_unit_uses_every_default() -> None:
    unit, notices = parse()
    assert notices == []
    assert unit.name == "su-orders"
    assert unit.service == "OrderServiceAssured"
    assert unit.target_service == "OrderService"
    assert unit.target_url == "http://127.0.0.1:9000/orders"
    assert unit.provides_auto_start is True
    assert unit.consumes_auto_start is True
    assert unit.is_idempotent is False
    assert unit.retry == RetryPolicy(number=3, base_interval=10, factor=3)
    assert unit.timeout_ms == 30_000
    assert unit.mep == "InOnly"
    assert unit.time_to_live is None
    assert unit.stop_timeout is None


def test_a_service_unit_without_a_name_is_named_after_its_ase_service() -> None:
    unit, _ = parse(su_name="")
    assert unit.name == "OrderServiceAssured"


def test_service_unit_ttl_and_stop_timeout_inherit_the_component_values() -> None:
    component = ComponentConfig(stop_timeout=15, time_to_live=900)
    unit, _ = parse(component=component)
    assert unit.effective_ttl(component) == 900
    assert unit.effective_stop_timeout(component) == 15


def test_service_unit_ttl_and_stop_timeout_override_the_component_values() -> None:
    component = ComponentConfig(stop_timeout=15, time_to_live=900)
    unit, notices = parse(provides(**{"stop-timeout": "5"}), consumes(**{"time-to-live": "120"}), component)
    assert notices == []
    assert unit.effective_ttl(component) == 120
    assert unit.effective_stop_timeout(component) == 5


@pytest.mark.parametrize("service", ["{urn:x}Orders", "ord:Orders", "Orders"])
def test_the_ase_service_is_the_local_part_of_the_provides_service_name(service: str) -> None:
    unit, _ = parse(provides(**{"service-name": service}))
    assert unit.service == "Orders"


@pytest.mark.parametrize("service", ["", "   "])
def test_a_provides_section_without_service_name_raises_parameter_error(service: str) -> None:
    with pytest.raises(ParameterError, match="service-name"):
        parse(provides(**{"service-name": service}))


@pytest.mark.parametrize("service", ["{urn:x}Order Service", "{urn:x}Orders/../x", "{urn:x}Ordres%2F", "x" * 201])
def test_an_invalid_ase_service_name_raises_parameter_error(service: str) -> None:
    with pytest.raises(ParameterError, match="Invalid ASE service name"):
        parse(provides(**{"service-name": service}))


@pytest.mark.parametrize("url", ["", "ftp://host/x", "127.0.0.1:9000/orders", "http://", "http:///orders"])
def test_a_missing_or_non_http_target_url_raises_parameter_error(url: str) -> None:
    with pytest.raises(ParameterError, match="target-url"):
        parse(consumes_section=consumes(**{"target-url": url}))


def test_an_https_target_url_is_accepted() -> None:
    unit, _ = parse(consumes_section=consumes(**{"target-url": "https://target.example.org/x"}))
    assert unit.target_url == "https://target.example.org/x"


def test_mep_and_timeout_come_from_the_consumes_section() -> None:
    unit, _ = parse(consumes_section=consumes(mep="RobustInOnly", timeout="2000"))
    assert (unit.mep, unit.timeout_ms) == ("RobustInOnly", 2000)


# -- interface names: W0003 ---------------------------------------------------------


def test_different_interface_names_warn_w0003_and_use_the_consumes_interface() -> None:
    unit, notices = parse(
        provides(**{"interface-name": "{urn:a}ProvidedItf"}), consumes(**{"interface-name": "{urn:b}TargetItf"})
    )
    assert notices == [Notice("SE-ASE-W0003", {"itf_consume": "{urn:b}TargetItf", "itf_provide": "{urn:a}ProvidedItf"})]
    assert unit.interface == "{urn:b}TargetItf"
    assert unit.target_interface == "{urn:b}TargetItf"


def test_equal_interface_names_do_not_warn() -> None:
    unit, notices = parse(provides(**{"interface-name": "{urn:a}Itf"}), consumes(**{"interface-name": "{urn:a}Itf"}))
    assert notices == []
    assert unit.interface == "{urn:a}Itf"


def test_an_interface_name_given_in_one_section_only_is_used_without_warning() -> None:
    unit, notices = parse(consumes_section=consumes(**{"interface-name": "{urn:b}TargetItf"}))
    assert notices == []
    assert unit.interface == "{urn:b}TargetItf"


# -- booleans and integers: W0013, W0014, W0015, W0017 ------------------------------


def test_a_non_boolean_is_idempotent_warns_w0013_and_uses_false() -> None:
    unit, notices = parse(consumes_section=consumes(**{"is-idempotent": "maybe"}))
    assert notices == [Notice("SE-ASE-W0013", {"value": "maybe", "default": "false"})]
    assert unit.is_idempotent is False
    assert (
        notices[0].message == "Invalid boolean value 'maybe' for parameter 'is-idempotent'. Default value used: false."
    )


def test_a_non_integer_ttl_warns_w0014_and_inherits_the_component_ttl() -> None:
    component = ComponentConfig(time_to_live=900)
    unit, notices = parse(consumes_section=consumes(**{"time-to-live": "1h"}), component=component)
    assert notices == [Notice("SE-ASE-W0014", {"value": "1h", "default": 900})]
    assert unit.time_to_live is None
    assert unit.effective_ttl(component) == 900


def test_a_non_integer_stop_timeout_warns_w0015_and_inherits_the_component_stop_timeout() -> None:
    component = ComponentConfig(stop_timeout=45)
    unit, notices = parse(provides(**{"stop-timeout": "2.5"}), component=component)
    assert notices == [Notice("SE-ASE-W0015", {"value": "2.5", "default": 45})]
    assert unit.effective_stop_timeout(component) == 45


@pytest.mark.parametrize("section", ["provides", "consumes"])
def test_a_non_boolean_must_be_automatically_started_warns_w0017_and_uses_true(section: str) -> None:
    bad = {"mustBeAutomaticallyStarted": "sometimes"}
    unit, notices = parse(provides(**bad), consumes()) if section == "provides" else parse(provides(), consumes(**bad))
    assert notices == [Notice("SE-ASE-W0017", {"default": "true"})]
    assert unit.provides_auto_start is True
    assert unit.consumes_auto_start is True


def test_must_be_automatically_started_false_is_read_per_section() -> None:
    unit, notices = parse(provides(mustBeAutomaticallyStarted="false"), consumes(mustBeAutomaticallyStarted="true"))
    assert notices == []
    assert (unit.provides_auto_start, unit.consumes_auto_start) == (False, True)


# -- retry policy and TTL: PROC-026, W0016 ------------------------------------------


def test_retry_delays_grow_as_base_times_factor_to_the_power_n_minus_1() -> None:
    assert [RetryPolicy(3, 10, 3).delay(n) for n in (1, 2, 3)] == [10, 30, 90]
    assert [RetryPolicy(4, 1, 2).delay(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert [RetryPolicy(3, 5, 1).delay(n) for n in (1, 2, 3)] == [5, 5, 5]


def test_retry_total_duration_sums_every_delay() -> None:
    assert RetryPolicy(3, 10, 3).total_duration == 130
    assert RetryPolicy(0, 10, 3).total_duration == 0


def test_retry_policy_parameters_are_read_from_the_consumes_section() -> None:
    unit, _ = parse(
        consumes_section=consumes(
            **{"retry-policy-number": "5", "retry-policy-base-interval": "2", "retry-policy-factor": "4"}
        )
    )
    assert unit.retry == RetryPolicy(number=5, base_interval=2, factor=4)


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ("retry-policy-number", "three"),
        ("retry-policy-number", "-1"),
        ("retry-policy-base-interval", "1.5"),
        ("retry-policy-factor", "0"),
        ("retry-policy-factor", "x"),
        ("timeout", "0"),
        ("timeout", "2s"),
    ],
)
def test_a_bad_retry_policy_or_timeout_value_raises_parameter_error(parameter: str, value: str) -> None:
    with pytest.raises(ParameterError, match=parameter):
        parse(consumes_section=consumes(**{parameter: value}))


def test_a_ttl_shorter_than_the_retry_schedule_warns_w0016_and_is_raised() -> None:
    # 3 retries of 10, 30, 90 s = 130 s, plus 4 invocations of 30 s timeout = 120 s.
    unit, notices = parse(consumes_section=consumes(**{"is-idempotent": "true", "time-to-live": "60"}))
    assert notices == [Notice("SE-ASE-W0016", {"ttl": 250})]
    assert unit.time_to_live == 250


def test_an_inherited_component_ttl_too_short_for_the_retry_schedule_is_raised_on_the_service_unit() -> None:
    component = ComponentConfig(time_to_live=10)
    consumes_section = consumes(**{"is-idempotent": "true", "retry-policy-number": "2", "timeout": "1500"})
    unit, notices = parse(consumes_section=consumes_section, component=component)
    # 10 + 30 s of delays, 3 × 1.5 s of invocations rounded up to 5 s.
    assert notices == [Notice("SE-ASE-W0016", {"ttl": 45})]
    assert unit.effective_ttl(component) == 45


@pytest.mark.parametrize(
    "extra",
    [
        {"is-idempotent": "false", "time-to-live": "60"},  # no retry for a non-idempotent target
        {"is-idempotent": "true", "time-to-live": "0"},  # infinite TTL
        {"is-idempotent": "true", "time-to-live": "250"},  # exactly enough
        {"is-idempotent": "true", "time-to-live": "60", "retry-policy-number": "0"},  # no retry at all
    ],
)
def test_no_w0016_when_the_ttl_is_compliant_or_no_retry_applies(extra: dict[str, str]) -> None:
    unit, notices = parse(consumes_section=consumes(**extra))
    assert "SE-ASE-W0016" not in codes_of(notices)
    assert unit.time_to_live == int(extra["time-to-live"])


# -- queue names: PROC-000, W0012, E0022, E0001 --------------------------------------


def test_default_queue_names_are_the_service_name_and_its_suffixes() -> None:
    unit, _ = parse()
    assert unit.areas == QueueNames(
        pending="OrderServiceAssured",
        expired="OrderServiceAssured_expired",
        timedout="OrderServiceAssured_timedout",
        error="OrderServiceAssured_error",
        fault="OrderServiceAssured_fault",
    )


@pytest.mark.parametrize(("parameter", "attr"), sorted(config.QUEUE_PARAMETERS.items()))
@pytest.mark.parametrize("section", ["provides", "consumes"])
def test_each_queue_name_parameter_sets_its_queue_from_either_section(parameter: str, attr: str, section: str) -> None:
    given = {parameter: "custom_queue"}
    unit, notices = (
        parse(provides(**given), consumes()) if section == "provides" else parse(provides(), consumes(**given))
    )
    assert notices == []
    assert getattr(unit.areas, attr) == "custom_queue"
    others = set(config.QUEUE_PARAMETERS.values()) - {attr}
    defaults = QueueNames.default("OrderServiceAssured")
    for other in others:
        assert getattr(unit.areas, other) == getattr(defaults, other)


def test_a_queue_name_given_twice_with_the_same_value_warns_w0012_and_is_used() -> None:
    same = {"persistence-area-name-error": "orders_err"}
    unit, notices = parse(provides(**same), consumes(**same))
    assert notices == [Notice("SE-ASE-W0012", {"parameter": "persistence-area-name-error"})]
    assert unit.areas.error == "orders_err"


def test_a_queue_name_given_twice_with_different_values_raises_e0022() -> None:
    with pytest.raises(DeploymentError) as caught:
        parse(provides(**{"persistence-area-name": "a"}), consumes(**{"persistence-area-name": "b"}))
    assert caught.value.code.id == "SE-ASE-E0022"
    assert caught.value.params == {"parameter": "persistence-area-name"}


@pytest.mark.parametrize("name", ["orders queue", "orders/x", "/queue/x", "é"])
def test_an_unusable_queue_name_raises_e0001(name: str) -> None:
    with pytest.raises(DeploymentError) as caught:
        parse(consumes_section=consumes(**{"persistence-area-name-fault": name}))
    assert caught.value.code.id == "SE-ASE-E0001"
    assert caught.value.params["area"] == name


def test_all_queues_lists_each_distinct_queue_once_pending_first() -> None:
    assert QueueNames.default("S").all() == ["S", "S_expired", "S_timedout", "S_error", "S_fault"]
    assert QueueNames("p", "dead", "dead", "dead", "f").all() == ["p", "dead", "f"]


# -- notices ------------------------------------------------------------------------


def test_a_notice_renders_its_message_and_public_text() -> None:
    notice = Notice("SE-ASE-W0016", {"ttl": 250})
    assert notice.message.startswith("Retry policy configuration and TTL are not compliant. TTL is increased to 250")
    assert notice.public.startswith("WARNING SE-ASE-W0016: Retry policy configuration")


def test_notices_are_returned_in_rule_order() -> None:
    unit, notices = parse(
        provides(
            **{"interface-name": "{urn:a}I", "mustBeAutomaticallyStarted": "x", "persistence-area-name": "q"},
        ),
        consumes(**{"interface-name": "{urn:b}I", "is-idempotent": "y", "persistence-area-name": "q"}),
    )
    assert codes_of(notices) == ["SE-ASE-W0003", "SE-ASE-W0017", "SE-ASE-W0013", "SE-ASE-W0012"]
    assert unit.areas.pending == "q"
