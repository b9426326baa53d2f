"""The limits of a job's fields (docs/guides/api.md "Input rules"), in one table.

The model's validators, the admin form and the API serializer all read their
bounds from here, and both judge a payload with :func:`payload_problem`, so
the two ways in accept and refuse exactly the same values, in the same words;
tests/integration/test_job_limits.py walks every boundary through
both. The schedule's own limits stay with the schedule rules
(``jobs.schedules``) and are only listed here.

The per-owner limits (docs/guides/owners.md "Owner limits") are listed here
too, with their settings and the range a setting or an owner's override may
take; the decisions and the refusals are in ``jobs.quotas``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypedDict

from django.conf import settings
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

# Each per-owner limit: the setting that holds its default, and the range
# that setting and an owner's override (jobs.OwnerLimits, the same field
# name) may take. The minimum interval stops at 60 s, cron's own
# granularity, so no cron schedule ever needs checking against it.
OWNER_LIMITS: dict[str, tuple[str, Range]] = {
    "jobs_per_owner": ("PUNCTUAL_MAX_JOBS_PER_OWNER", Range(0, 10_000_000)),
    "min_interval_seconds": ("PUNCTUAL_MIN_INTERVAL_SECONDS", Range(1, 60)),
    "backfill_runs_per_hour": ("PUNCTUAL_BACKFILL_RUNS_PER_HOUR", Range(0, 100_000_000)),
    "triggers_per_minute": ("PUNCTUAL_TRIGGERS_PER_MINUTE", Range(0, 1_000_000)),
}

# Every limit setting: its default, and the range settings.py accepts. A
# payload travels inside a request body of at most 1 MiB.
LIMIT_SETTINGS: dict[str, tuple[int, Range]] = {
    "PUNCTUAL_MAX_JOBS_PER_OWNER": (1000, OWNER_LIMITS["jobs_per_owner"][1]),
    "PUNCTUAL_MIN_INTERVAL_SECONDS": (10, OWNER_LIMITS["min_interval_seconds"][1]),
    "PUNCTUAL_BACKFILL_RUNS_PER_HOUR": (10_000, OWNER_LIMITS["backfill_runs_per_hour"][1]),
    "PUNCTUAL_TRIGGERS_PER_MINUTE": (10, OWNER_LIMITS["triggers_per_minute"][1]),
    "PUNCTUAL_MAX_PAYLOAD_BYTES": (64 * 1024, Range(1024, 512 * 1024)),
}


def max_payload_bytes() -> int:
    """The largest payload a job may carry (``PUNCTUAL_MAX_PAYLOAD_BYTES``)."""
    return settings.PUNCTUAL_MAX_PAYLOAD_BYTES


def payload_bytes(value: object) -> bytes:
    """The payload as compact JSON, UTF-8, with its keys sorted: one value
    always gives the same bytes (its hash in the audit log depends on it), and
    as many bytes as it is delivered in."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return text.encode("utf-8")


def payload_size(value: object) -> int:
    """Bytes of the payload as delivered."""
    return len(payload_bytes(value))


# The API's (DRF's) words for a text over its MAX_LENGTHS; the admin form uses them too.
TOO_LONG_TEXT = "Ensure this field has no more than {max_length} characters."

# In an API body the payload is a field of the job object: it sits at level 2,
# and its own nesting counts from there. The admin's payload box holds the
# payload alone, and is judged at the same level, so that a value is refused
# (or accepted) the same way in both.
PAYLOAD_DEPTH = 2
NOT_AN_OBJECT = "Must be a JSON object."


def payload_problem(value: object) -> str | None:
    """Why ``value`` cannot be a job's payload, or None: the one rule of the
    API's ``payload`` field and the admin's payload box."""
    if not isinstance(value, dict):
        return NOT_AN_OBJECT
    reason = strict_json.problem(value, depth=PAYLOAD_DEPTH)
    if reason:
        return reason
    size = payload_size(value)
    limit = max_payload_bytes()
    if size > limit:
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
