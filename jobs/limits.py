"""The limits of a job's fields (README "Input rules"), in one table.

The model's validators, the admin form and the API serializer all read their
bounds from here, so the two ways in accept and refuse exactly the same
values; tests/integration/test_job_limits.py walks every boundary through
both. The schedule's own limits stay with the schedule rules
(``jobs.schedules``) and are only listed here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypedDict

from django.core.validators import MaxValueValidator, MinValueValidator

from jobs.schedules import MAX_CRON_LENGTH, MAX_INTERVAL_SECONDS


class Bounds(TypedDict):
    min_value: int
    max_value: int


@dataclass(frozen=True)
class Range:
    """Inclusive bounds of an integer field."""

    min: int
    max: int

    def bounds(self) -> Bounds:
        """``min_value`` and ``max_value``, as form and serializer fields take them."""
        return {"min_value": self.min, "max_value": self.max}

    def validators(self) -> list:
        return [MinValueValidator(self.min), MaxValueValidator(self.max)]


RANGES: dict[str, Range] = {
    "interval_seconds": Range(1, MAX_INTERVAL_SECONDS),
    "timeout_seconds": Range(1, 900),
    "max_attempts": Range(1, 20),
    "retry_backoff_seconds": Range(1, 3600),
    "max_catchup": Range(1, 100),
    "misfire_grace_seconds": Range(1, 86_400),
    "jitter_seconds": Range(0, 3600),
    # Null means never. A streak longer than a thousand failed runs is not a
    # threshold anyone means; a typo of one is caught here.
    "pause_after_failures": Range(1, 1000),
}

# Text fields: at most this many characters.
MAX_LENGTHS: dict[str, int] = {
    "name": 200,
    "description": 2000,
    "cron": MAX_CRON_LENGTH,
    "timezone": 64,
    "url": 2000,
}

MAX_PAYLOAD_BYTES = 64 * 1024


def payload_bytes(value: object) -> bytes:
    """The payload as compact JSON, UTF-8, with its keys sorted: one value
    always gives the same bytes (its hash in the audit log depends on it), and
    as many bytes as it is delivered in."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return text.encode("utf-8")


def payload_size(value: object) -> int:
    """Bytes of the payload as delivered."""
    return len(payload_bytes(value))
