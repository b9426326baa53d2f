"""The limits of a job's fields (README "Input rules"), in one table.

The model's validators, the admin form and the API serializer all read their
bounds from here, and both judge a payload with :func:`payload_problem`, so
the two ways in accept and refuse exactly the same values, in the same words;
tests/integration/test_job_limits.py walks every boundary through
both. The schedule's own limits stay with the schedule rules
(``jobs.schedules``) and are only listed here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypedDict

from django.core.validators import MaxValueValidator, MinValueValidator

from core import strict_json
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

# The API's (DRF's) words for a text over its MAX_LENGTHS; the admin form uses them too.
TOO_LONG_TEXT = "Ensure this field has no more than {max_length} characters."

MAX_PAYLOAD_BYTES = 64 * 1024
# In an API body the payload is a field of the job object: it sits at level 2,
# and its own nesting counts from there. The admin's payload box holds the
# payload alone, and is judged at the same level, so that a value is refused
# (or accepted) the same way in both.
PAYLOAD_DEPTH = 2
NOT_AN_OBJECT = "Must be a JSON object."


def payload_size(value: object) -> int:
    """Bytes of the payload as delivered: compact JSON, UTF-8."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def payload_problem(value: object) -> str | None:
    """Why ``value`` cannot be a job's payload, or None: the one rule of the
    API's ``payload`` field and the admin's payload box."""
    if not isinstance(value, dict):
        return NOT_AN_OBJECT
    reason = strict_json.problem(value, depth=PAYLOAD_DEPTH)
    if reason:
        return reason
    size = payload_size(value)
    if size > MAX_PAYLOAD_BYTES:
        limit = MAX_PAYLOAD_BYTES
        return f"Must be at most {limit:,} bytes once serialized as JSON (got {size:,})."
    return None


def payload_from_text(text: str) -> dict:
    """The payload a JSON text (the admin's payload box) holds, read by the
    API's strict rules; :class:`strict_json.JSONProblem` names what is wrong."""
    value = strict_json.loads(text)
    reason = payload_problem(value)
    if reason:
        raise strict_json.JSONProblem(reason)
    assert isinstance(value, dict)  # payload_problem refuses anything else
    return value
