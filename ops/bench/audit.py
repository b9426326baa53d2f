"""The ``audit`` scenario: ``manage.py audit_fires`` over 10,000 jobs and
1,000,000 runs (not part of ``all``); seconds per audit."""

from __future__ import annotations

import datetime as dt
import statistics
import time

from django.db import connection, transaction

from jobs import crypto, history
from ops.bench.scratch import bench_owner, reset
from runs import identity
from runs.models import RUN_COLUMNS_SQL


def scenario_audit(*, jobs: int, runs_per_job: int, cron_share: float, repeat: int, force: bool):
    """The fire auditor over a history of ``jobs`` jobs with ``runs_per_job``
    runs each, every slot accounted for: per-minute jobs (interval 60 s, and a
    ``cron_share`` of them ``* * * * *``) created ``runs_per_job`` minutes
    ago. Jobs, runs and spans are inserted by SQL; the audit must come out
    clean, and its time is the figure."""
    from ops.audit import audit

    reset(force)
    _insert_history(jobs, runs_per_job, cron_share)
    seconds = []
    report = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = audit()
        seconds.append(time.perf_counter() - t0)
        assert report.ok, report.render()
    assert report is not None
    return {
        "audit_seconds": round(statistics.median(seconds), 2),
        "runs": [round(s, 2) for s in seconds],
        "slots": report.counts["slots"],
        "audited_runs": report.counts["runs"],
    }


def _insert_history(jobs: int, runs_per_job: int, cron_share: float) -> None:
    """The bench owner's ``jobs`` jobs, their schedule spans and
    ``runs_per_job`` succeeded runs each, one a minute up to this minute."""
    owner = bench_owner().pk
    secret = crypto.encrypt(crypto.generate_secret())
    crons = round(jobs * cron_share)
    # One transaction: the schedule-history guard checks at commit that every
    # job inserted has its span.
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT date_trunc('minute', now()) - %s * interval '1 minute'", [runs_per_job])
        base = cur.fetchone()[0]
        cur.execute(
            """
            INSERT INTO jobs_job (
                id, owner_id, name, description, cron, interval_seconds, timezone,
                target_kind, url, payload, timeout_seconds, max_attempts,
                retry_backoff_seconds, misfire_policy, max_catchup, misfire_grace_seconds,
                overlap_policy, jitter_seconds, state, pause_note, consecutive_failures,
                next_fire_at, secret_encrypted, previous_secret_encrypted, version,
                created_at, updated_at)
            SELECT gen_random_uuid(), %(owner)s, 'bench-audit-' || g, '',
                   CASE WHEN g <= %(crons)s THEN '* * * * *' END,
                   CASE WHEN g > %(crons)s THEN 60 END, 'UTC',
                   'webhook', 'http://127.0.0.1:9/', '{}', 30, 3, 1, 'skip', 3, 60, 'skip', 0,
                   'active', '', 0, %(base)s + (%(n)s + 1) * interval '1 minute',
                   %(secret)s, '', 1, %(base)s, now()
            FROM generate_series(1, %(jobs)s) AS g
            """,
            {
                "owner": owner,
                "crons": crons,
                "jobs": jobs,
                "base": base,
                "n": runs_per_job,
                "secret": secret,
            },
        )
        history.open_missing_spans(base)
        # Each run gets its fire's id (runs/identity.py), as every real path
        # gives it; PostgreSQL cannot make them, so they are hashed here, a
        # thousand jobs' runs per statement.
        cur.execute("SELECT id::text FROM jobs_job WHERE owner_id = %s", [owner])
        job_ids = [job_id for (job_id,) in cur.fetchall()]
        slots = [
            (k, identity.utc_text(base + dt.timedelta(minutes=k)))
            for k in range(1, runs_per_job + 1)
        ]
        for start in range(0, len(job_ids), 1000):
            rows = [(j, k, f"{j}/{at}") for j in job_ids[start : start + 1000] for k, at in slots]
            cur.execute(
                f"""
                INSERT INTO runs_run ({RUN_COLUMNS_SQL}, started_at)
                SELECT r.id, r.job_id, %(base)s + r.k * interval '1 minute', 'scheduled',
                       'succeeded', '', 1, 3, NULL, '', now(), now(), '', 'webhook', true,
                       %(owner)s, now()
                FROM unnest(%(ids)s::uuid[], %(jobs)s::uuid[], %(ks)s::int[])
                     AS r(id, job_id, k)
                """,
                {
                    "owner": owner,
                    "base": base,
                    "ids": identity.ids_for_names([name for _, _, name in rows]),
                    "jobs": [j for j, _, _ in rows],
                    "ks": [k for _, k, _ in rows],
                },
            )
        cur.execute("ANALYZE jobs_job")
        cur.execute("ANALYZE runs_run")
        cur.execute("ANALYZE jobs_schedulespan")
