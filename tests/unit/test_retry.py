"""Retry decisions (docs/concepts/runs-and-retries.md "Retries"): pure, told the time,
seeded randomness."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from zoneinfo import ZoneInfo

import pytest

from runs.retry import (
    MAX_DELAY_SECONDS,
    Outcome,
    backoff_seconds,
    classify_status,
    next_retry_delay,
    parse_retry_after,
)

NOW = datetime(2026, 11, 30, 1, 2, 3, tzinfo=UTC)


def http_date(moment: datetime) -> str:
    return format_datetime(moment.astimezone(UTC), usegmt=True)


# --- classification -------------------------------------------------------

CLASSIFICATION = [
    (100, Outcome.PERMANENT),
    (101, Outcome.PERMANENT),
    (200, Outcome.SUCCESS),
    (201, Outcome.SUCCESS),
    (202, Outcome.SUCCESS),
    (204, Outcome.SUCCESS),
    (299, Outcome.SUCCESS),
    (300, Outcome.PERMANENT),
    (301, Outcome.PERMANENT),
    (302, Outcome.PERMANENT),
    (303, Outcome.PERMANENT),
    (304, Outcome.PERMANENT),
    (307, Outcome.PERMANENT),
    (308, Outcome.PERMANENT),
    (400, Outcome.PERMANENT),
    (401, Outcome.PERMANENT),
    (403, Outcome.PERMANENT),
    (404, Outcome.PERMANENT),
    (405, Outcome.PERMANENT),
    (408, Outcome.RETRYABLE),
    (409, Outcome.PERMANENT),
    (410, Outcome.PERMANENT),
    (413, Outcome.PERMANENT),
    (422, Outcome.PERMANENT),
    (425, Outcome.RETRYABLE),
    (429, Outcome.RETRYABLE),
    (451, Outcome.PERMANENT),
    (499, Outcome.PERMANENT),
    (500, Outcome.RETRYABLE),
    (501, Outcome.RETRYABLE),
    (502, Outcome.RETRYABLE),
    (503, Outcome.RETRYABLE),
    (504, Outcome.RETRYABLE),
    (599, Outcome.RETRYABLE),
    (600, Outcome.PERMANENT),
    (99, Outcome.PERMANENT),
]


@pytest.mark.parametrize(("status", "expected"), CLASSIFICATION)
def test_classify_status_follows_the_retry_table(status: int, expected: Outcome) -> None:
    assert classify_status(status) is expected


def test_outcome_values_are_stable_strings() -> None:
    # Stored in attempt rows and metrics labels: renaming a value is a migration.
    assert [o.value for o in Outcome] == ["success", "retryable", "permanent"]
    assert Outcome.RETRYABLE == "retryable"


# --- backoff ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_first_retry_waits_at_most_the_base(seed: int) -> None:
    rng = random.Random(seed)
    delay = backoff_seconds(1, 10, rng)
    assert 0 <= delay <= 10


@pytest.mark.parametrize(
    ("attempt", "base", "ceiling"),
    [
        (1, 10, 10),
        (2, 10, 20),
        (3, 10, 40),
        (4, 10, 80),
        (9, 10, 2560),
        (10, 10, 3600),
        (1, 3600, 3600),
        (2, 3600, 3600),
        (1, 1, 1),
    ],
)
def test_backoff_stays_within_its_exponential_window(attempt: int, base: int, ceiling: int) -> None:
    rng = random.Random(1234)
    delays = [backoff_seconds(attempt, base, rng) for _ in range(500)]
    assert all(0 <= d <= ceiling for d in delays)
    # Full jitter: the draws spread over the whole window, not around its top.
    assert min(delays) < ceiling * 0.1
    assert max(delays) > ceiling * 0.9


@pytest.mark.parametrize("attempt", [13, 20, 64, 1000, 10**6])
def test_backoff_is_capped_at_one_hour_even_for_huge_attempt_numbers(attempt: int) -> None:
    rng = random.Random(7)
    delays = [backoff_seconds(attempt, 3600, rng) for _ in range(200)]
    assert all(0 <= d <= MAX_DELAY_SECONDS for d in delays)
    assert max(delays) > MAX_DELAY_SECONDS * 0.9


def test_backoff_is_deterministic_for_a_seeded_rng() -> None:
    first = [backoff_seconds(3, 10, random.Random(42)) for _ in range(3)]
    assert first[0] == first[1] == first[2]


@pytest.mark.parametrize("attempt", [0, -1])
def test_backoff_rejects_attempt_numbers_below_one(attempt: int) -> None:
    with pytest.raises(ValueError):
        backoff_seconds(attempt, 10, random.Random(0))


# --- Retry-After --------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        ("  30  ", 30.0),
        ("3600", 3600.0),
        ("3601", 3600.0),
        ("86400", 3600.0),
        ("9" * 5000, 3600.0),
    ],
)
def test_retry_after_delta_seconds(header: str, expected: float) -> None:
    assert parse_retry_after(header, NOW) == expected


def test_retry_after_http_date_in_the_future() -> None:
    assert parse_retry_after(http_date(NOW + timedelta(seconds=90)), NOW) == 90.0


def test_retry_after_http_date_is_read_in_gmt_whatever_the_zone_of_now() -> None:
    berlin_now = NOW.astimezone(ZoneInfo("Europe/Berlin"))
    assert parse_retry_after(http_date(NOW + timedelta(minutes=5)), berlin_now) == 300.0


def test_retry_after_literal_imf_fixdate() -> None:
    now = datetime(2015, 10, 21, 7, 27, 0, tzinfo=UTC)
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now) == 60.0


def test_retry_after_http_date_in_the_past_means_now() -> None:
    assert parse_retry_after(http_date(NOW - timedelta(hours=2)), NOW) == 0.0


def test_retry_after_http_date_far_ahead_is_capped_at_one_hour() -> None:
    assert parse_retry_after(http_date(NOW + timedelta(days=3)), NOW) == 3600.0


@pytest.mark.parametrize(
    "header",
    [None, "", "   ", "-5", "-0", "1.5", "soon", "12abc", "Tomorrow at noon", "٣٠", "0x10"],
)
def test_retry_after_garbage_is_ignored(header: str | None) -> None:
    assert parse_retry_after(header, NOW) is None


def test_retry_after_refuses_a_naive_now() -> None:
    with pytest.raises(ValueError):
        parse_retry_after("10", datetime(2026, 1, 1))


# --- next_retry_delay ----------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_honour_retry_after(status: int) -> None:
    delay = next_retry_delay(1, 10, status, "120", NOW, random.Random(0))
    assert delay == 120.0


@pytest.mark.parametrize("status", [429, 503])
def test_honoured_retry_after_is_capped_at_one_hour(status: int) -> None:
    delay = next_retry_delay(1, 10, status, "99999", NOW, random.Random(0))
    assert delay == 3600.0


@pytest.mark.parametrize("status", [500, 502, 504, 408, None])
def test_other_failures_ignore_retry_after_and_back_off(status: int | None) -> None:
    # A 500 with "Retry-After: 3000" must not park the run for 50 minutes.
    rng_seed = 5
    delay = next_retry_delay(1, 10, status, "3000", NOW, random.Random(rng_seed))
    assert delay == backoff_seconds(1, 10, random.Random(rng_seed))
    assert 0 <= delay <= 10


def test_unusable_retry_after_on_429_falls_back_to_backoff() -> None:
    delay = next_retry_delay(2, 10, 429, "later please", NOW, random.Random(3))
    assert delay == backoff_seconds(2, 10, random.Random(3))
    assert 0 <= delay <= 20


def test_missing_retry_after_on_503_falls_back_to_backoff() -> None:
    delay = next_retry_delay(3, 10, 503, None, NOW, random.Random(3))
    assert 0 <= delay <= 40
