"""Log formatters. Every line about a run carries run_id, job_id and attempt,
passed through ``extra=`` so that both formats can show them as fields."""

from __future__ import annotations

import json
import logging

# Attributes every LogRecord has; anything else came from ``extra=``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class KeyValueFormatter(logging.Formatter):
    """``time level logger message key=value ...``: readable in a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{self.formatTime(record)} {record.levelname} {record.name}: {record.getMessage()}"
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers (``PUNCTUAL_LOG_JSON=true``)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(_extras(record))
        if record.exc_info:
            data["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)
