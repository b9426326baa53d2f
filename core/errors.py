"""Errors whose message is written for the user.

A domain module raises a subclass (``jobs.schedules.ScheduleError``); the API's
exception handler (core/api_errors.py) answers any of them as a 400 that shows
the message, without knowing the domain that raised it.
"""

from __future__ import annotations


class UserFacingError(ValueError):
    """Invalid input; ``str(exc)`` is shown to the user as it is."""
