"""Creating jobs from what an owner sent: one job, or a list of them, all or
none. The API's create (api/job_views.py) and ``manage.py import_crontab``
(ops/management/commands/import_crontab.py) both come through here, so a job
imported from a crontab is validated, limited and recorded exactly as one
sent to ``POST /api/v1/jobs/``.

1. ``create_context``: the database time, the owner's limits, and which of
   the names sent their live jobs already hold, in one statement.
2. ``validate_many``: each item through the API's ``JobSerializer`` (one
   instance for all), the errors named by index (``{"3": {"cron": [...]}}``),
   a name sent twice named at its second item. The host names were looked up
   before, outside any transaction (jobs/lookups.py), and come in as
   ``resolve``.
3. ``insert_many``: the one create verb (jobs/creation.py), and the unique
   name's clash with a concurrent create turned into the same 400.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from django.db import IntegrityError, transaction
from rest_framework import serializers
from rest_framework.serializers import as_serializer_error

from alerts import selection
from api.job_serializers import JobSerializer
from core.db import DB_NOW_SQL, bound_cursor
from jobs import changes, lookups, quotas
from jobs.creation import create_jobs
from jobs.limits import OWNER_LIMITS
from jobs.models import Job, OwnerLimits

__all__ = [
    "CREATE_CONTEXT",
    "Created",
    "Items",
    "Validated",
    "create_context",
    "insert_many",
    "validate_many",
]

Items = list[Any]
Created = list[tuple[Job, str]]
Validated = list[dict[str, Any]]

NAME_TAKEN = "You already have a job with this name."


def names_sent(items: list) -> set[str]:
    """The names ``items`` send, as sent and trimmed as the name field trims them."""
    return {
        candidate
        for item in items
        if isinstance(item, dict) and isinstance(item.get("name"), str)
        for candidate in (item["name"], item["name"].strip())
    }


# What a create reads before it validates: the database's time, which of the
# request's names the owner's live jobs hold (the unique name index), and
# the owner's limit overrides (quotas.OVERRIDES' columns, NULL without a
# row). One statement: they were three round trips of every single create.
CREATE_CONTEXT = f"""
    SELECT {DB_NOW_SQL},
           ARRAY(SELECT name FROM jobs_job
                 WHERE owner_id = %(owner)s AND deleted_at IS NULL
                   AND name = ANY(%(names)s::text[])),
           {", ".join(f"o.{column}" for column in OWNER_LIMITS)}
    FROM (SELECT) AS one
    LEFT JOIN {OwnerLimits._meta.db_table} AS o ON o.owner_id = %(owner)s
"""


def create_context(owner, items: list) -> tuple[dt.datetime, quotas.Limits, set[str]]:
    """The database time, ``owner``'s limits, and the names among ``items``
    their live jobs hold."""
    with bound_cursor(prepare=True) as cur:
        cur.execute(CREATE_CONTEXT, {"owner": owner.pk, "names": sorted(names_sent(items))})
        now, taken, *overrides = cur.fetchone()
    return now.astimezone(dt.UTC), quotas.limits_from(owner, overrides), set(taken)


def validate_many(
    owner, items: Items, *, resolve: lookups.Answers, context: dict[str, Any] | None = None
) -> tuple[JobSerializer, Validated, dt.datetime, quotas.Limits]:
    """Validate every item of a list as a single create would be: the
    serializer (to answer the jobs with), the validated items, the database
    time and the owner's limits. Any error raises ``ValidationError`` with
    every item's errors named by its index; nothing was written."""
    now, limits, taken = create_context(owner, items)
    body = JobSerializer(
        context={
            **(context or {}),
            "owner": owner,
            "now": now,
            "last_runs": {},  # a new job has no runs
            "taken_names": taken,
            "resolve": resolve,
            "limits": limits,
        }
    )
    errors: dict[str, Any] = {}
    valid: Validated = []
    first_with_name: dict[str, int] = {}
    for index, item in enumerate(items):
        try:
            attrs = body.run_validation(item)
        except serializers.ValidationError as exc:
            errors[str(index)] = as_serializer_error(exc)
            continue
        first = first_with_name.setdefault(attrs["name"], index)
        if first != index:
            errors[str(index)] = {"name": [f"Item {first} of this request has this name too."]}
        valid.append(attrs)
    if errors:
        raise serializers.ValidationError(errors)
    return body, valid, now, limits


def insert_many(
    owner,
    validated: Validated,
    now: dt.datetime,
    limits: quotas.Limits,
    *,
    actor,
    channel: str,
    savepoint: bool,
) -> Created:
    """Create the jobs through the one create verb (jobs/creation.py): all
    of them, with their spans and events, if the owner's live jobs limit
    (``limits``) has room for all of them; each with its plain secret, to be
    shown once. ``savepoint`` as ``create_jobs`` takes it."""
    # The channel selections are rows of their own (alerts/selection.py),
    # written after the jobs, in one transaction with them. Without any, a
    # single create stays one statement, in autocommit (jobs/creation.py).
    chosen = [attrs.pop("alert_channels", None) for attrs in validated]
    jobs = [Job(owner=owner, **attrs) for attrs in validated]
    with transaction.atomic() if any(chosen) else contextlib.nullcontext():
        secrets = _create(owner, jobs, validated, now, limits, actor, channel, savepoint)
        for job, ids in zip(jobs, chosen, strict=True):
            if ids:
                selection.choose(job.pk, ids)
    return list(zip(jobs, secrets, strict=True))


def _create(owner, jobs, validated, now, limits, actor, channel, savepoint) -> list[str]:
    try:
        return create_jobs(
            jobs,
            now=now,
            actor=actor,
            channel=channel,
            changes=[changes.initial(attrs) for attrs in validated],
            limits=limits,
            savepoint=savepoint,
        )
    except IntegrityError as exc:
        # The unique name per owner: a concurrent create took a name after
        # the check. The same 400 as the check's.
        if "job_unique_name_per_owner" not in str(exc):
            raise
        if len(jobs) == 1:
            raise serializers.ValidationError({"name": [NAME_TAKEN]}) from None
        _, _, taken = create_context(owner, [{"name": job.name} for job in jobs])
        clashes = {
            str(i): {"name": [NAME_TAKEN]} for i, job in enumerate(jobs) if job.name in taken
        }
        if not clashes:
            raise
        raise serializers.ValidationError(clashes) from None
