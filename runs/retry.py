"""Retry decisions: which outcomes are retryable, and how long to wait.

Everything here is pure. The caller passes the current time (``now``) and a
``random.Random``, so the worker can use the database clock and tests can pin
both. No ORM, no network, no clock reads.

The rules are docs/concepts/runs-and-retries.md "Retries":

- retryable: connection errors, timeouts, 408, 425, 429 and 5xx;
- not retryable: any other 4xx, and 3xx (redirects are never followed);
- the wait before attempt n+1 is uniform in
  ``[0, min(1 hour, base × 2^(n−1))]`` (exponential backoff, full jitter);
- on 429 or 503 a ``Retry-After`` header is honoured, up to 1 hour.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

__all__ = [
    "MAX_DELAY_SECONDS",
    "Outcome",
    "backoff_seconds",
    "classify_status",
    "next_retry_delay",
    "parse_retry_after",
]

MAX_DELAY_SECONDS = 3600

# Statuses that say "try again later" rather than "this request is wrong":
# 408 Request Timeout, 425 Too Early (TLS early data replay protection),
# 429 Too Many Requests. Every 5xx is added in classify_status().
_RETRYABLE_4XX = frozenset({408, 425, 429})

# Only these statuses carry a Retry-After we trust. A receiver that answers 500
# with "Retry-After: 3600" could otherwise park a run for an hour on a bug.
_RETRY_AFTER_STATUSES = frozenset({429, 503})

# 2**12 × base (base >= 1) is already past the one-hour cap. Clamping the
# exponent keeps a runaway attempt counter from building a huge integer.
_MAX_EXPONENT = 12


class Outcome(StrEnum):
    SUCCESS = "success"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


def classify_status(status: int) -> Outcome:
    """Sort an HTTP status into success, retryable or permanent failure.

    3xx is permanent because redirects are never followed: following one would
    let a receiver bounce a signed request to an address that was never vetted
    (SSRF), and retrying would only get the same redirect again. 1xx and codes
    outside 100–599 are protocol nonsense that a retry will not fix.
    """
    if 200 <= status <= 299:
        return Outcome.SUCCESS
    if status in _RETRYABLE_4XX or 500 <= status <= 599:
        return Outcome.RETRYABLE
    return Outcome.PERMANENT


def backoff_seconds(attempt: int, base_seconds: int, rng: random.Random) -> float:
    """Seconds to wait before attempt ``attempt + 1``, after attempt ``attempt`` failed.

    Full jitter (uniform over the whole window, not base ± noise) spreads out the
    retries of many runs that failed together, e.g. when a shared receiver went
    down at the top of the hour, so they do not come back as one thundering herd.
    """
    if attempt < 1:
        raise ValueError("attempt must be >= 1")
    if base_seconds < 0:
        raise ValueError("base_seconds must be >= 0")
    exponent = min(attempt - 1, _MAX_EXPONENT)
    ceiling = min(MAX_DELAY_SECONDS, base_seconds * 2**exponent)
    return rng.uniform(0, ceiling)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header, or None if unusable.

    Accepts delta-seconds (``"120"``) or an HTTP-date (RFC 9110 §10.2.3). A date
    in the past means "now" (0). Anything else — negative numbers, fractions,
    garbage — is ignored, so the caller falls back to its own backoff. The result
    is capped at one hour so that a hostile or buggy receiver cannot park a run
    for days.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        # Only the length matters past the cap; avoid parsing a 10,000-digit number.
        if len(text) > 10:
            return float(MAX_DELAY_SECONDS)
        return float(min(int(text), MAX_DELAY_SECONDS))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:  # older Pythons returned None on garbage
        return None
    if when.tzinfo is None:
        # "-0000" yields a naive datetime; HTTP-dates are always GMT.
        when = when.replace(tzinfo=UTC)
    delay = (when - now).total_seconds()
    return min(max(delay, 0.0), float(MAX_DELAY_SECONDS))


def next_retry_delay(
    attempt: int,
    base_seconds: int,
    status: int | None,
    retry_after: str | None,
    now: datetime,
    rng: random.Random,
) -> float:
    """The wait before the next attempt: Retry-After on 429/503, else backoff.

    ``status`` is None when the attempt never got a response (timeout,
    connection error).
    """
    if status in _RETRY_AFTER_STATUSES:
        honoured = parse_retry_after(retry_after, now)
        if honoured is not None:
            return honoured
    return backoff_seconds(attempt, base_seconds, rng)
