"""The ``recovery`` scenario: N per-minute cron jobs whose next fire was 24
hours ago (a day-long outage); the time each locked tick takes to drain them,
and a check that each job got exactly 100 missed rows and every other fire
counted."""

from __future__ import annotations

import datetime as dt
import statistics
import time

from django.db import connection, transaction

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from jobs import crypto, history
from ops.bench.scratch import bench_owner, reset


def insert_cron_jobs(count: int, *, cron: str, behind: dt.timedelta) -> dt.datetime:
    """Insert ``count`` cron jobs (skip policy, 60 s grace) created, and next
    due, ``behind`` ago on the minute, as after an outage of that length.
    Returns that first fire."""
    owner = bench_owner().pk
    secret = crypto.encrypt(crypto.generate_secret())
    first = db_now().replace(second=0, microsecond=0) - behind
    # One transaction: the schedule-history guard checks at commit that every
    # inserted job has its span.
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO jobs_job (
                id, owner_id, name, description, cron, interval_seconds, timezone,
                target_kind, url, payload, timeout_seconds, max_attempts,
                retry_backoff_seconds, misfire_policy, max_catchup, misfire_grace_seconds,
                overlap_policy, jitter_seconds, state, pause_note, consecutive_failures,
                next_fire_at, secret_encrypted, previous_secret_encrypted, version,
                created_at, updated_at, start_at)
            SELECT gen_random_uuid(), %(owner)s, 'bench-' || g, '', %(cron)s, NULL, 'UTC',
                   'webhook', 'http://127.0.0.1:9/', '{"bench": true}', 30, 3, 1, 'skip', 3,
                   60, 'skip', 0, 'active', '', 0,
                   %(first)s, %(secret)s, '', 1, %(first)s, %(first)s, NULL
            FROM generate_series(1, %(count)s) AS g
            """,
            {"owner": owner, "cron": cron, "first": first, "count": count, "secret": secret},
        )
        # Jobs inserted by SQL get their schedule history by SQL too.
        history.open_missing_spans(first)
    with connection.cursor() as cur:
        cur.execute("ANALYZE jobs_job")
    return first


# Per job: its missed rows, all its rows, its latest fire with a row, and the
# fires it counted without a row (on the job and on its open schedule span).
RECOVERY_CHECK = """
    SELECT j.id, count(*) FILTER (WHERE r.state = 'missed') AS missed, count(*) AS runs,
           max(r.scheduled_at) AS last_fire, j.missed_count, j.missed_since,
           s.missed_count AS span_missed_count
    FROM jobs_job AS j
    JOIN runs_run AS r ON r.job_id = j.id
    JOIN jobs_schedulespan AS s ON s.job_id = j.id AND s.ended_at IS NULL
    GROUP BY j.id, s.id
"""


def scenario_recovery(*, jobs: int, batch: int, repeat: int, force: bool) -> dict:
    """Drain ``jobs`` per-minute cron jobs a day behind, timing each tick (one
    transaction, so the time the jobs stay locked), and check the outcome."""
    from runs.planning import MAX_MISSED_ROWS

    behind = dt.timedelta(hours=24)
    totals, longest, ticks = [], [], []
    counts: set[tuple[int, int, int]] = set()
    for _ in range(repeat):
        reset(force)
        first_fire = insert_cron_jobs(jobs, cron="* * * * *", behind=behind)
        d = Dispatcher(batch_size=batch)
        durations = []
        while True:
            t0 = time.perf_counter()
            result = d.tick()
            durations.append(time.perf_counter() - t0)
            if result.jobs == 0:
                break
        totals.append(sum(durations))
        longest.append(max(durations))
        ticks.append(len(durations) - 1)
        with connection.cursor() as cur:
            cur.execute(RECOVERY_CHECK)
            rows = cur.fetchall()
        assert len(rows) == jobs, f"{len(rows)} of {jobs} jobs got runs"
        for _job, missed, runs, last_fire, counted, since, span_counted in rows:
            assert missed == MAX_MISSED_ROWS, f"a job got {missed} missed rows"
            # Every fire from the first to the last with a row is a row or
            # counted, exactly: (last - first) / 1 min + 1 of them.
            fires = (last_fire - first_fire) // dt.timedelta(minutes=1) + 1
            assert counted == fires - runs, f"counted {counted}, expected {fires - runs}"
            assert span_counted == counted and since == first_fire
            counts.add((fires, runs, counted))
    return {
        "behind_hours": behind.total_seconds() / 3600,
        "first_fire": first_fire.isoformat(),
        "locked_s_total": round(statistics.median(totals), 3),
        "locked_s_longest_tick": round(statistics.median(longest), 3),
        "ticks": ticks,
        # (fires due, rows written, fires counted) per job, as seen in the runs
        "fires_rows_counted": sorted(counts),
        "runs": {
            "total_s": [round(x, 3) for x in totals],
            "longest_s": [round(x, 3) for x in longest],
        },
    }
