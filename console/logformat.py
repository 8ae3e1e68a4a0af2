"""Log formatting without stack traces (the spec: "no stack trace is logged").

An exception attached to a record is reduced to one line, ``ExcType: message``,
so an operator sees what happened without a traceback in the logs.
"""

from __future__ import annotations

import logging


class OneLineFormatter(logging.Formatter):
    def formatException(self, ei: logging._SysExcInfoType) -> str:  # noqa: N802 - logging's API
        exc_type, exc, _ = ei
        if exc_type is None:
            return ""
        return f"{exc_type.__name__}: {exc}"

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's API
        return ""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text.replace("\n", " | ")
