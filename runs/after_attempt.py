"""What happens to a run after one attempt: the one rule, for every caller.

The webhook worker (``dispatch/worker.py``) and the pull API's complete
(``api/run_views.py``) both call ``after_attempt()``, so a retryable failure
with attempts left waits the same backoff, and the last attempt fails the
run the same way, however the attempt was made. ``pause_after_streak()`` is
the other half of "should the job pause?": the failure streak lives in the
database and is known only once a batch of outcomes is written
(``runs/outcomes.py``), so it is asked then.

Pure, like ``runs/retry.py``: no ORM, no clock. The caller passes ``now``
and a ``random.Random``, so it is testable with a table of cases.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass

from runs.retry import Outcome, next_retry_delay

SUCCEEDED, RETRYING, FAILED = "succeeded", "retrying", "failed"
GONE_NOTE = "Paused automatically: the target answered 410 Gone."


@dataclass(frozen=True)
class AfterAttempt:
    """The run's next state, and what to record for the attempt."""

    state: str  # succeeded | retrying | failed
    attempt_outcome: str  # an Attempt.Outcome value: succeeded | failed | permanent
    retry_in: float = 0.0  # seconds until the retry is claimable (retrying only)
    reason: str = ""  # why the run failed (failed only)
    pause_note: str = ""  # not empty: pause the job, with this note


def after_attempt(
    outcome: Outcome,
    *,
    attempt: int,
    max_attempts: int,
    backoff_seconds: int,
    now: dt.datetime,
    rng: random.Random,
    status_code: int | None = None,
    retry_after: str | None = None,
    gone: bool = False,
) -> AfterAttempt:
    """Decide the run's next state after attempt number ``attempt``.

    1. Success: the run succeeded.
    2. A retryable failure with attempts left: retry after the backoff, or
       after the receiver's Retry-After on 429/503 (``next_retry_delay``).
    3. Otherwise the run failed: "attempts exhausted" after a retryable
       failure, "permanent error" after a permanent one.
    4. Whatever the state, a 410 Gone (``gone``) also pauses the job: the
       target says it will never want this delivery again.
    """
    pause_note = GONE_NOTE if gone else ""
    if outcome is Outcome.SUCCESS:
        return AfterAttempt(state=SUCCEEDED, attempt_outcome="succeeded", pause_note=pause_note)
    if outcome is Outcome.RETRYABLE and attempt < max_attempts:
        delay = next_retry_delay(attempt, backoff_seconds, status_code, retry_after, now, rng)
        return AfterAttempt(
            state=RETRYING, attempt_outcome="failed", retry_in=delay, pause_note=pause_note
        )
    if outcome is Outcome.RETRYABLE:
        return AfterAttempt(
            state=FAILED,
            attempt_outcome="failed",
            reason="attempts exhausted",
            pause_note=pause_note,
        )
    return AfterAttempt(
        state=FAILED, attempt_outcome="permanent", reason="permanent error", pause_note=pause_note
    )


def pause_after_streak(streak: int, pause_after_failures: int | None) -> str:
    """The note to pause a job with once ``streak`` runs in a row failed, or "".

    ``pause_after_failures`` empty (None or 0) means never pause.
    """
    if pause_after_failures and streak >= pause_after_failures:
        return f"Paused automatically after {streak} consecutive failed runs."
    return ""
