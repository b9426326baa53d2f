"""The bench's scratch database: its owner, the check that the database is
one, clearing it between runs, and jobs inserted by SQL by the thousand."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model
from django.db import connection, transaction

from core.db import db_now
from jobs import crypto, history
from jobs.limits import OWNER_LIMITS
from ops.bench import BenchRefused

BENCH_OWNER = "punctual-bench"


def bench_owner():
    """The owner of every bench job. Its limits (docs/guides/owners.md
    "Owner limits") are the highest an override takes: the bench creates
    thousands of jobs and triggers one job many times a minute."""
    from jobs.models import OwnerLimits

    user, _ = get_user_model().objects.get_or_create(
        username=BENCH_OWNER, defaults={"is_active": False}
    )
    lifted = {name: bounds.max for name, (_setting, bounds) in OWNER_LIMITS.items()}
    lifted["min_interval_seconds"] = OWNER_LIMITS["min_interval_seconds"][1].min
    OwnerLimits.objects.update_or_create(
        owner=user, defaults={**lifted, "note": "the benchmark's owner"}
    )
    return user


def check_scratch(force: bool) -> None:
    if connection.vendor != "postgresql":
        raise BenchRefused("the bench measures PostgreSQL: set DATABASE_URL=postgres://...")
    from jobs.models import Job

    foreign = Job.objects.exclude(owner__username=BENCH_OWNER).count()
    if foreign and not force:
        raise BenchRefused(
            f"this database holds {foreign} jobs the bench did not make; "
            "point DATABASE_URL at a scratch database, or pass --force"
        )


def reset(force: bool) -> None:
    """Remove the bench's jobs and runs (everything, on a pure scratch database)."""
    with connection.cursor() as cur:
        if not force:
            cur.execute(
                "TRUNCATE runs_attempt, runs_run, jobs_jobevent, jobs_schedulespan, jobs_job"
                " CASCADE"
            )
        else:
            owner = bench_owner().pk
            sub = "SELECT id FROM jobs_job WHERE owner_id = %s"
            cur.execute(
                f"DELETE FROM runs_attempt WHERE run_id IN "
                f"(SELECT id FROM runs_run WHERE job_id IN ({sub}))",
                [owner],
            )
            cur.execute(f"DELETE FROM runs_run WHERE job_id IN ({sub})", [owner])
            cur.execute(f"DELETE FROM jobs_jobevent WHERE job_id IN ({sub})", [owner])
            cur.execute(f"DELETE FROM jobs_schedulespan WHERE job_id IN ({sub})", [owner])
            cur.execute("DELETE FROM jobs_job WHERE owner_id = %s", [owner])


# One transaction: the schedule-history guard checks each new job at commit,
# after open_missing_spans has given it its span.
@transaction.atomic
def insert_jobs(
    count: int,
    *,
    interval: int,
    due: int = 0,
    url: str = "http://127.0.0.1:9/",
    spread: bool = False,
    overlap: str = "skip",
    timeout: int = 30,
    name: str = "bench-",
    owner: int | None = None,
) -> None:
    """Insert ``count`` interval jobs in one statement; the first ``due`` are due
    now, the rest a day from now. ``spread`` staggers the anchors evenly over
    one interval, as a real fleet's are, instead of all firing at once. The
    jobs are the bench owner's, or ``owner``'s (a user's id)."""
    owner = bench_owner().pk if owner is None else owner
    secret = crypto.encrypt(crypto.generate_secret())
    with connection.cursor() as cur:
        cur.execute(
            """
            WITH base AS (SELECT date_trunc('second', now()) + interval '2 seconds' AS t0)
            INSERT INTO jobs_job (
                id, owner_id, name, description, cron, interval_seconds, timezone,
                target_kind, url, payload, timeout_seconds, max_attempts,
                retry_backoff_seconds, misfire_policy, max_catchup, misfire_grace_seconds,
                overlap_policy, jitter_seconds, state, pause_note, consecutive_failures,
                next_fire_at, secret_encrypted, previous_secret_encrypted, version,
                created_at, updated_at, start_at)
            SELECT gen_random_uuid(), %(owner)s, %(name)s || g, '', NULL, %(interval)s, 'UTC',
                   'webhook', %(url)s, '{"bench": true}', %(timeout)s, 3, 1, 'skip', 3, 60,
                   %(overlap)s, 0, 'active', '', 0,
                   CASE WHEN g <= %(due)s THEN now() - interval '1 second'
                        WHEN %(spread)s THEN base.t0 + (g %% %(count)s) * %(step)s
                        ELSE now() + interval '1 day' END,
                   %(secret)s, '', 1, now(), now(),
                   CASE WHEN %(spread)s THEN base.t0 + (g %% %(count)s) * %(step)s END
            FROM generate_series(1, %(count)s) AS g, base
            """,
            {
                "owner": owner,
                "interval": interval,
                "url": url,
                "timeout": timeout,
                "overlap": overlap,
                "due": due,
                "spread": spread,
                "count": count,
                # psycopg adapts a timedelta to an interval; the stubs' list of SQL types omits it.
                "step": dt.timedelta(seconds=interval) / max(count, 1),  # type: ignore[dict-item]
                "secret": secret,
                "name": name,
            },
        )
    # Jobs inserted by SQL get their schedule history by SQL too.
    history.open_missing_spans(db_now())
    with connection.cursor() as cur:
        cur.execute("ANALYZE jobs_job")
