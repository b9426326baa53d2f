"""What happens to a run after one attempt (docs/concepts/runs-and-retries.md "Retries"):
the one rule that the webhook worker and the pull API share. Pure, told the time."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from runs.after_attempt import (
    GONE_NOTE,
    AfterAttempt,
    after_attempt,
    pause_after_streak,
)
from runs.retry import MAX_DELAY_SECONDS, Outcome

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def decide(outcome: Outcome, attempt: int = 1, max_attempts: int = 3, **kw) -> AfterAttempt:
    kw.setdefault("backoff_seconds", 10)
    return after_attempt(
        outcome,
        attempt=attempt,
        max_attempts=max_attempts,
        now=NOW,
        rng=random.Random(7),
        **kw,
    )


def test_success_succeeds_the_run():
    assert decide(Outcome.SUCCESS) == AfterAttempt(state="succeeded", attempt_outcome="succeeded")


def test_success_on_the_last_attempt_still_succeeds():
    assert decide(Outcome.SUCCESS, attempt=3, max_attempts=3).state == "succeeded"


def test_retryable_failure_with_attempts_left_retries_within_the_backoff_window():
    d = decide(Outcome.RETRYABLE, attempt=2, backoff_seconds=10)
    assert (d.state, d.attempt_outcome, d.reason) == ("retrying", "failed", "")
    assert 0 <= d.retry_in <= 20  # full jitter over [0, base x 2^(n-1)]


def test_retryable_failure_on_the_last_attempt_fails_the_run():
    d = decide(Outcome.RETRYABLE, attempt=3, max_attempts=3)
    assert (d.state, d.attempt_outcome, d.reason, d.retry_in) == (
        "failed",
        "failed",
        "attempts exhausted",
        0.0,
    )


def test_permanent_failure_fails_at_once_even_with_attempts_left():
    d = decide(Outcome.PERMANENT, attempt=1, max_attempts=5)
    assert (d.state, d.attempt_outcome, d.reason) == ("failed", "permanent", "permanent error")


def test_retry_after_is_honoured_on_429():
    d = decide(Outcome.RETRYABLE, status_code=429, retry_after="120")
    assert d.retry_in == 120.0


def test_retry_after_is_ignored_on_500():
    d = decide(Outcome.RETRYABLE, status_code=500, retry_after="3000", backoff_seconds=1)
    assert d.retry_in <= 1


def test_retry_after_is_capped():
    d = decide(Outcome.RETRYABLE, status_code=503, retry_after="999999")
    assert d.retry_in == MAX_DELAY_SECONDS


def test_same_inputs_give_the_same_decision():
    assert decide(Outcome.RETRYABLE) == decide(Outcome.RETRYABLE)


@pytest.mark.parametrize("outcome", [Outcome.SUCCESS, Outcome.RETRYABLE, Outcome.PERMANENT])
def test_410_gone_pauses_the_job_whatever_the_run_becomes(outcome):
    assert decide(outcome, gone=True).pause_note == GONE_NOTE


@pytest.mark.parametrize("outcome", [Outcome.SUCCESS, Outcome.RETRYABLE, Outcome.PERMANENT])
def test_without_410_the_attempt_pauses_nothing(outcome):
    assert decide(outcome).pause_note == ""


@pytest.mark.parametrize(
    ("streak", "limit", "pauses"),
    [
        (1, None, False),
        (99, 0, False),
        (2, 3, False),
        (3, 3, True),
        (4, 3, True),
    ],
)
def test_pause_after_failures_pauses_once_the_streak_reaches_the_limit(streak, limit, pauses):
    note = pause_after_streak(streak, limit)
    assert bool(note) is pauses
    if pauses:
        assert f"{streak} consecutive failed runs" in note
