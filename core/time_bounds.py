"""The datetimes every way in accepts: 1970 to 9000, in UTC (docs/guides/api.md "Input rules").

The dispatcher and workers add intervals, jitter and leases to stored times,
and must never overflow year 9999; times before 1970 are typos. The API's
datetime fields and the admin's job form both check with :func:`range_problem`,
so they refuse the same times with the same words.
"""

from __future__ import annotations

import datetime as dt

EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)
OUT_OF_RANGE = "Must be between 1970-01-01 and 9000-01-01."


def range_problem(value: dt.datetime) -> str | None:
    """Why the aware datetime ``value`` is refused, or None."""
    return None if EARLIEST <= value < LATEST else OUT_OF_RANGE
