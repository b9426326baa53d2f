"""What an alert says: its title and body (pure: no ORM, no clock).

The count is visible: an alert that stands for five failures of a job within
the quiet period says "and 4 more failures".
"""

from __future__ import annotations

import datetime as dt

_TITLES = {
    "failed": "Punctual: {job} failed",
    "paused": "Punctual: {job} was paused",
    "missed": "Punctual: {job} missed fires",
    "recovered": "Punctual: {job} recovered",
    "workers_behind": "Punctual: workers are behind",
    "no_dispatcher": "Punctual: no dispatcher is running",
    "test": "Punctual: test alert",
}

_LINES = {
    "failed": "A run of {job} failed after its last attempt.",
    "paused": "{job} was paused by the system.",
    "missed": "{job} missed {count} fire{s}.",
    "recovered": "{job} succeeded again after failing.",
    "workers_behind": "Claimable runs are waiting longer than the backlog limit.",
    "no_dispatcher": "No dispatcher process has been seen: fires are not being made.",
    "test": "This is a test alert from Punctual to the channel {channel}.",
}

_MORE = {
    "failed": "failure",
    "paused": "pause",
    "recovered": "recovery",
    "workers_behind": "time this was seen",
    "no_dispatcher": "time this was seen",
}


def more(kind: str, count: int) -> str:
    """ " (and 4 more failures)" for an alert that stands for 5 events."""
    extra = count - 1
    if extra <= 0 or kind not in _MORE:
        return ""
    noun = _MORE[kind]
    plural = noun if extra == 1 else (noun[:-1] + "ies" if noun.endswith("y") else noun + "s")
    if noun.startswith("time"):
        plural = "time this was seen" if extra == 1 else "times this was seen"
    return f" (and {extra} more {plural})"


def render(
    *,
    kind: str,
    count: int,
    detail: str,
    job_name: str | None,
    channel_name: str,
    due_at: dt.datetime,
) -> tuple[str, str]:
    """The title and the body of an alert."""
    job = job_name or "the install"
    title = _TITLES.get(kind, "Punctual: {job}").format(job=job) + more(kind, count)
    line = _LINES.get(kind, "{job}").format(
        job=job, count=count, s="" if count == 1 else "s", channel=channel_name
    )
    body = [line + more(kind, count)]
    if detail:
        body.append(f"Latest: {detail}")
    body.append(f"At {due_at.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC.")
    return title, "\n".join(body)
