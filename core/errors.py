"""Errors whose message is written for the user.

A domain module raises a subclass (``jobs.schedules.ScheduleError``); the API's
exception handler (core/api_errors.py) answers any of them as a 400 that shows
the message, without knowing the domain that raised it.
"""

from __future__ import annotations


class UserFacingError(ValueError):
    """Invalid input; ``str(exc)`` is shown to the user as it is."""


class LimitExceeded(Exception):
    """A request over one of its owner's limits (jobs/quotas.py); nothing was written.

    ``limit`` names the limit (``"jobs_per_owner"``); ``str(exc)`` is the
    message, the same in the admin and the API. ``retry_after`` is the
    seconds after which the same request fits again: set for a rate that
    waiting frees (answered 429 with ``Retry-After``), None for a quota that
    waiting does not (answered 403).
    """

    def __init__(self, limit: str, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after = retry_after
