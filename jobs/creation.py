"""Making jobs: the one verb that the API and the admin create jobs through.

``create_jobs`` is the whole of what a new job gets, whichever face made
it: a secret, its creation time and first next fire from the database
clock, its first schedule span, its "created" event, and the owner's live
jobs limit checked under the owner's lock. The faces only validate what
they were sent (each with its own words, in its own place) and say what
the event records (``changes``); they build the jobs unsaved and hand
them over.
"""

from __future__ import annotations

import datetime as dt

from core.db import hot_statement
from jobs import crypto, quotas
from jobs.models import Job


def create_jobs(
    jobs: list[Job],
    *,
    now: dt.datetime,
    actor,
    channel: str,
    changes: list[dict],
    limits: quotas.Limits,
    savepoint: bool = True,
) -> list[str]:
    """Create ``jobs`` (unsaved, all of one owner), or none of them; return
    each one's plain secret, in order, for the caller to show once.

    1. Give each job a new secret. Only its encrypted form is stored, and
       no event holds it: the returned list is the one copy.
    2. In one statement (``Job.create_many``), under the owner's lock on
       their count of live jobs: if all of ``jobs`` fit in
       ``limits.jobs_per_owner``, insert them (``created_at`` is ``now``,
       the database time, and the next fire is computed from it), their
       first schedule span and their "created" events (``changes[i]`` for
       ``jobs[i]``, built with jobs/changes.py, through ``channel`` by
       ``actor``).
    3. If they did not fit, nothing was written: raise the refusal
       (``LimitExceeded``, with the same words for the API and the admin).

    The statement is atomic alone and never JIT-compiled (core/db.py
    ``NO_JIT``: a bulk create's insert can cost past ``jit_above_cost``): in
    autocommit on a direct connection, whose session has JIT off (no BEGIN
    and COMMIT round trips); behind a transaction pooler, in a transaction
    of its own that turns it off. Inside a caller's transaction (the
    admin's, an Idempotency-Key's) it runs in a savepoint if ``savepoint``:
    a caller that asks what clashed after an ``IntegrityError`` (the unique
    name per owner, passed on as raised) needs its transaction alive. The
    refusal is raised after the statement's block, so that it never breaks
    the caller's transaction.
    """
    secrets = []
    for job in jobs:
        secret = crypto.generate_secret()
        job.set_secret(secret)
        secrets.append(secret)
    allowed = limits.jobs_per_owner
    with hot_statement(savepoint=savepoint):
        live = Job.create_many(
            jobs, now=now, actor=actor, channel=channel, changes=changes, allowed=allowed
        )
    assert live is not None  # create_many answers it when given ``allowed``
    refusal = quotas.jobs_refusal(live, len(jobs), allowed)
    if refusal is not None:
        raise refusal
    return secrets
