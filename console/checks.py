"""System checks: the component's broker parameters must be usable (SE-ASE-000)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register

from ase_engine.config import ParameterError
from ase_engine.errors import ConfigurationError


@register()
def check_component_parameters(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    from console.component import installed_component

    try:
        _, notices = installed_component()
    except ConfigurationError as exc:
        return [Error(exc.public, id=exc.code.id)]
    except ParameterError as exc:
        return [Error(str(exc), id="ase.E001")]
    return [Warning(notice.public, id=notice.code) for notice in notices]
