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


@register()
def check_history_and_reports(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """ASE_HISTORY_* and report settings must make sense (a typo'd value is refused, never ignored)."""
    from django.conf import settings

    errors: list[CheckMessage] = []
    if settings.ASE_HISTORY_RETENTION_DAYS < 0:
        errors.append(Error("ASE_HISTORY_RETENTION_DAYS must be 0 (keep forever) or a number of days", id="ase.E010"))
    if settings.ASE_HISTORY_PURGE_INTERVAL <= 0:
        errors.append(Error("ASE_HISTORY_PURGE_INTERVAL must be a positive number of seconds", id="ase.E011"))
    if settings.ASE_HISTORY_PURGE_BATCH < 1:
        errors.append(Error("ASE_HISTORY_PURGE_BATCH must be at least 1", id="ase.E012"))
    if settings.ASE_REPORT_PARTITIONS < 1:
        errors.append(Error("ASE_REPORT_PARTITIONS must be at least 1", id="ase.E013"))
    if settings.ASE_REPORT_JDBC_URL and not settings.ASE_REPORT_JDBC_URL.startswith("jdbc:"):
        errors.append(Error("ASE_REPORT_JDBC_URL must be a JDBC URL (jdbc:postgresql://... )", id="ase.E014"))
    if settings.ASE_HISTORY_WRITER not in ("auto", "thread", "process"):
        errors.append(Error("ASE_HISTORY_WRITER must be auto, thread or process", id="ase.E015"))
    elif settings.ASE_HISTORY_WRITER == "process":
        from console.history import writer_process_possible

        if not writer_process_possible():
            message = "ASE_HISTORY_WRITER=process needs the database in a SQLite file; use auto or thread"
            errors.append(Error(message, id="ase.E016"))
    return errors
