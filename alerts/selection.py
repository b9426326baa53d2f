"""A job's own alert channels (``JobChannel``): which of its owner's
channels it uses instead of all of them (docs/guides/alerts.md "Which
channels a job uses")."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from alerts.models import Channel, JobChannel

MAX_CHANNELS = 50


def refusal(owner_id: int, ids: list[int]) -> str | None:
    """Why ``ids`` cannot be a job of ``owner_id``'s channels, or None."""
    if len(ids) > MAX_CHANNELS:
        return f"At most {MAX_CHANNELS} channels."
    found = set(Channel.objects.filter(owner_id=owner_id, pk__in=ids).values_list("pk", flat=True))
    missing = [i for i in ids if i not in found]
    if missing:
        # Another owner's channel is as unknown as one that never existed.
        return f"No such alert channel of yours: {', '.join(map(str, missing))}."
    return None


def chosen(job_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, list[int]]:
    """Each job's own channel ids (a job without a selection is absent)."""
    found: dict[uuid.UUID, list[int]] = {}
    rows = JobChannel.objects.filter(job_id__in=list(job_ids)).order_by("channel_id")
    for job_id, channel_id in rows.values_list("job_id", "channel_id"):
        found.setdefault(job_id, []).append(channel_id)
    return found


def choose(job_id: uuid.UUID, ids: list[int]) -> None:
    """Replace a job's selection (``[]``: back to all its owner's channels)."""
    JobChannel.objects.filter(job_id=job_id).exclude(channel_id__in=ids).delete()
    JobChannel.objects.bulk_create(
        [JobChannel(job_id=job_id, channel_id=i) for i in ids], ignore_conflicts=True
    )
