"""The component as this process sees it: its parameters, checked with the spec's codes.

``component_config()`` reads the environment's parameters (SE-ASE-000:
E0002-E0005 and E0015 abort, W0014/W0015 fall back to the defaults and are
logged once), then applies the hot-updatable runtime values kept in the
database (CFG-010).
"""

from __future__ import annotations

import functools
import logging

from django.conf import settings

from ase_engine import codes
from ase_engine.config import ComponentConfig, Notice, parse_component

log = logging.getLogger("ase.component")


@functools.cache
def installed_component() -> tuple[ComponentConfig, tuple[Notice, ...]]:
    """The component parameters from the environment, checked once per process.

    Raises ``ConfigurationError`` (E0002-E0005, E0015).
    """
    config, notices = parse_component(settings.ASE_COMPONENT)
    for notice in notices:
        codes.log(log, notice.code, **notice.params)
    log.info(
        "component parameters: transport=%s url=%s vhost=%s stop-timeout=%s time-to-live=%s",
        config.broker_transport,
        config.broker_url,
        config.broker_vhost,
        config.stop_timeout,
        config.time_to_live,
    )
    return config, tuple(notices)


def component_config() -> ComponentConfig:
    """The installed parameters with the runtime values an operator changed (hot update)."""
    from console.models import ComponentSettings

    config, _ = installed_component()
    runtime = ComponentSettings.objects.filter(pk=1).values("time_to_live", "stop_timeout").first() or {}
    return config.with_runtime(stop_timeout=runtime.get("stop_timeout"), time_to_live=runtime.get("time_to_live"))
