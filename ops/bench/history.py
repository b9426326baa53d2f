"""The ``history`` scenario: dispatch, claim and complete rates (rows/s) and
the runs admin's pages (ms) on an empty runs table, then again over
``--history-runs`` finished runs (default 50 million) spread over the past 30
days, one daily partition each, with their attempts; and the ratio (not part
of ``all``)."""

from __future__ import annotations

import datetime as dt
import statistics
import time

from django.contrib.auth import get_user_model
from django.db import connection, transaction

from core.db import db_now
from core.sql import Placeholder
from ops.bench.dispatch import drain
from ops.bench.figures import median_of
from ops.bench.scratch import bench_owner, insert_jobs, reset
from runs.models import RUN_COLUMNS_SQL

HISTORY_DAYS = 30
HISTORY_JOBS = 1000
HISTORY_ADMIN = "punctual-bench-admin"
HOT_PATH_JOBS = "bench-hot-"

# One day of finished history into its day partition, by generate_series:
# the runs of HISTORY_JOBS jobs spread evenly over the day, mostly succeeded,
# with the few failed, missed, skipped and cancelled runs, late runs and
# non-scheduled kinds that the admin's filters look for. The ids are drawn at
# random, not hashed from the fire (runs/identity.py): PostgreSQL cannot make
# uuid5s, and hashing 50 million in Python would take longer than the rest of
# the bench; to the indexes a random uuid and a uuid5 look alike.
HISTORY_RUNS = f"""
    INSERT INTO {{runs}} ({RUN_COLUMNS_SQL}, started_at, lag_seconds, last_status_code)
    SELECT gen_random_uuid(), (%(jobs)s::uuid[])[1 + g %% %(njobs)s], at, k.kind, s.state,
           CASE s.state WHEN 'missed' THEN 'past grace' WHEN 'skipped' THEN 'overlap'
                        WHEN 'cancelled' THEN 'paused' ELSE '' END,
           1, 3, NULL, '', at, at + interval '80 milliseconds',
           CASE s.state WHEN 'failed' THEN 'HTTP 503' ELSE '' END, 'webhook', true, %(owner)s,
           at, CASE WHEN g %% 97 = 0 THEN 12.5 ELSE 0.05 END,
           CASE s.state WHEN 'succeeded' THEN 200 WHEN 'failed' THEN 503 END
    FROM generate_series(0, %(n)s - 1) AS g,
         LATERAL (SELECT %(day)s::timestamptz + g * %(step)s::float8 * interval '1 microsecond'
                  AS at) AS t,
         LATERAL (SELECT CASE WHEN g %% 50 = 1 THEN 'failed' WHEN g %% 100 = 2 THEN 'missed'
                              WHEN g %% 100 = 3 THEN 'skipped' WHEN g %% 200 = 4 THEN 'cancelled'
                              ELSE 'succeeded' END AS state) AS s,
         LATERAL (SELECT CASE WHEN g %% 200 = 5 THEN 'backfill' WHEN g %% 200 = 6 THEN 'manual'
                              WHEN g %% 100 = 7 THEN 'catch_up' ELSE 'scheduled' END AS kind) AS k
"""
# Its attempts: one per run that started one (missed and skipped runs did not).
HISTORY_ATTEMPTS = """
    INSERT INTO {attempts} (run_id, scheduled_at, number, worker, started_at, finished_at,
                            outcome, status_code, duration_ms, error)
    SELECT id, scheduled_at, 1, 'bench-worker', started_at, finished_at,
           CASE state WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'failed'
                      ELSE 'interrupted' END,
           last_status_code, 80, last_error
    FROM {runs} WHERE state NOT IN ('missed', 'skipped')
"""
# The tables of the day HISTORY_RUNS and HISTORY_ATTEMPTS fill: each day's
# in turn, attached as its partitions afterwards.
HISTORY_DAY_RUNS = Placeholder("runs", {"a day's table, here 2026-12-01's": "runs_run_p20261201"})
HISTORY_DAY_ATTEMPTS = Placeholder(
    "attempts", {"a day's table, here 2026-12-01's": "runs_attempt_p20261201"}
)


def fill_history(total: int, days: int = HISTORY_DAYS) -> dict:
    """``total`` finished runs over the ``days`` days before today, with their
    attempts. Each day is written into a table of its own and attached as
    that day's partition afterwards: building the indexes once over a
    loaded table is several times faster than growing them row by row."""
    from runs import partitions

    # Not due: they only own the history.
    insert_jobs(HISTORY_JOBS, interval=60, name="bench-history-")
    with connection.cursor() as cur:
        cur.execute("SELECT id FROM jobs_job WHERE owner_id = %s ORDER BY id", [bench_owner().pk])
        jobs = [row[0] for row in cur.fetchall()]
    today = db_now().date()
    first = today - dt.timedelta(days=days)
    # Empty days of an earlier run go: each day is made anew below.
    partitions.drop_expired_days(dt.datetime.combine(today, dt.time(), tzinfo=dt.UTC))
    partitions.ensure_partitions(today)
    per_day = total // days
    t0 = time.perf_counter()
    for n in range(days):
        day = first + dt.timedelta(days=n)
        count = per_day + (total - per_day * days if n == days - 1 else 0)
        lo = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
        hi = lo + dt.timedelta(days=1)
        runs = partitions.partition_name("runs_run", day)
        attempts = partitions.partition_name("runs_attempt", day)
        with transaction.atomic(), connection.cursor() as cur:
            for parent, part in (("runs_run", runs), ("runs_attempt", attempts)):
                cur.execute(
                    f"CREATE TABLE {part} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
                )
            cur.execute(
                HISTORY_RUNS.format(runs=runs),
                {
                    "jobs": jobs,
                    "njobs": len(jobs),
                    "owner": bench_owner().pk,
                    "n": count,
                    "day": lo,
                    "step": 86_400_000_000 // max(count, 1),
                },
            )
            cur.execute(HISTORY_ATTEMPTS.format(attempts=attempts, runs=runs))
            for parent, part in (("runs_run", runs), ("runs_attempt", attempts)):
                # The CHECK spares ATTACH a scan of the rows; ATTACH builds
                # the partition's indexes.
                cur.execute(
                    f"ALTER TABLE {part} ADD CONSTRAINT {part}_bounds"
                    " CHECK (scheduled_at >= %(lo)s AND scheduled_at < %(hi)s)",
                    {"lo": lo, "hi": hi},
                )
                cur.execute(
                    f"ALTER TABLE {parent} ATTACH PARTITION {part}"
                    " FOR VALUES FROM (%(lo)s) TO (%(hi)s)",
                    {"lo": lo, "hi": hi},
                )
                cur.execute(f"ALTER TABLE {part} DROP CONSTRAINT {part}_bounds")
    fill_s = time.perf_counter() - t0
    with connection.cursor() as cur:
        cur.execute("VACUUM (ANALYZE) runs_run")
        cur.execute("VACUUM (ANALYZE) runs_attempt")
        cur.execute("ANALYZE jobs_job")
    return {
        "runs": total,
        "days": days,
        "fill_s": round(fill_s, 1),
        "vacuum_analyze_s": round(time.perf_counter() - t0 - fill_s, 1),
    }


def hot_path(due: int, batch: int, claim_batch: int = 200) -> dict:
    """One round of the hot statements on ``due`` fresh due jobs: the
    dispatcher's inserts, then the claims and the completions (as the worker
    writes them, with their scheduled_at), in rows per second each."""
    from runs import leases, outcomes

    insert_jobs(due, interval=3600, due=due, name=HOT_PATH_JOBS)
    r = drain(batch)
    if r["runs"] != due:
        raise AssertionError(f"expected {due} fires, made {r['runs']}")
    dispatch = due / (r["t1"] - r["t0"])
    # As autovacuum would soon: without it, the planner takes a partition
    # emptied by the previous round for empty still, and the claims pay for
    # that rather than for the history (not timed).
    with connection.cursor() as cur:
        cur.execute("ANALYZE runs_run")

    claimed = []
    t0 = time.perf_counter()
    while True:
        got = leases.claim("bench-worker", limit=claim_batch, lease_seconds=300)
        if not got:
            break
        claimed += got
    claim_s = time.perf_counter() - t0
    if len(claimed) != due:
        raise AssertionError(f"claimed {len(claimed)} runs of {due}")

    t0 = time.perf_counter()
    for start in range(0, len(claimed), claim_batch):
        batch_results = [
            outcomes.Result(
                run_id=c.run_id,
                job_id=c.job_id,
                attempt=c.attempt,
                state="succeeded",
                status_code=200,
                duration_ms=5,
                scheduled_at=c.scheduled_at,
            )
            for c in claimed[start : start + claim_batch]
        ]
        done = outcomes.complete("bench-worker", batch_results)
        if done.stale:
            raise AssertionError(f"{len(done.stale)} completions were stale")
    complete_s = time.perf_counter() - t0
    return {
        "dispatch": dispatch,
        "claim": due / claim_s,
        "complete": due / complete_s,
    }


def forget_hot_path_jobs() -> None:
    """Remove the jobs (and runs) ``hot_path`` made, keeping the history."""
    owner = bench_owner().pk
    with connection.cursor() as cur:
        cur.execute(
            "SELECT array_agg(id) FROM jobs_job WHERE owner_id = %s AND name LIKE %s",
            [owner, HOT_PATH_JOBS + "%"],
        )
        ids = cur.fetchone()[0] or []
        since = db_now() - dt.timedelta(days=1)  # they fired just now: recent partitions only
        cur.execute(
            "DELETE FROM runs_attempt WHERE scheduled_at >= %s"
            " AND run_id IN (SELECT id FROM runs_run WHERE scheduled_at >= %s"
            " AND job_id = ANY(%s::uuid[]))",
            [since, since, ids],
        )
        cur.execute(
            "DELETE FROM runs_run WHERE scheduled_at >= %s AND job_id = ANY(%s::uuid[])",
            [since, ids],
        )
        for table in ("jobs_jobevent", "jobs_schedulespan"):
            cur.execute(f"DELETE FROM {table} WHERE job_id = ANY(%s::uuid[])", [ids])
        cur.execute("DELETE FROM jobs_job WHERE id = ANY(%s::uuid[])", [ids])


def admin_pages(repeat: int) -> dict:
    """Milliseconds (median of ``repeat``, after one warm-up) for the runs list,
    its usual filters and one run's page, through Django's test client as a
    superuser: the whole request, template rendering included."""
    from django.test import Client

    from runs.models import Run

    user, _ = get_user_model().objects.get_or_create(
        username=HISTORY_ADMIN, defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    some_run = Run.objects.filter(state="failed").order_by("-scheduled_at").first()
    pages = {
        "list": "/admin/runs/run/",
        "list_failed": "/admin/runs/run/?status=failed",
        "list_late": "/admin/runs/run/?status=late",
        "list_running": "/admin/runs/run/?status=running",
        "list_backfill": "/admin/runs/run/?kind=backfill",
    }
    if some_run is not None:  # an empty table has no third page, no run to open
        pages["list_page_3"] = "/admin/runs/run/?p=3"
        pages["change"] = f"/admin/runs/run/{some_run.pk}/change/"
    figures = {}
    for name, url in pages.items():
        times = []
        for k in range(repeat + 1):
            t0 = time.perf_counter()
            response = client.get(url)
            elapsed = (time.perf_counter() - t0) * 1000
            if response.status_code != 200:
                raise AssertionError(f"{url} answered {response.status_code}")
            if k:
                times.append(elapsed)
        figures[name] = round(statistics.median(times), 1)
    return figures


def scenario_history(*, runs: int, due: int, batch: int, repeat: int, force: bool) -> dict:
    """The hot path and the admin on an empty runs table, then again over
    ``runs`` finished runs of history spread over the past 30 days (one
    partition a day): the ratio says what the history costs. "Empty" has
    only the partitions of today and the coming days."""
    from runs import partitions

    reset(force)
    partitions.drop_expired_days(dt.datetime.combine(db_now().date(), dt.time(), tzinfo=dt.UTC))
    empty = []
    for _ in range(repeat):
        empty.append(hot_path(due, batch))
        forget_hot_path_jobs()
    admin_empty = admin_pages(repeat)

    reset(force)
    fill = fill_history(runs)
    full = []
    for _ in range(repeat):
        full.append(hot_path(due, batch))
        forget_hot_path_jobs()
    admin_full = admin_pages(repeat)

    def rates(rounds: list[dict]) -> dict:
        return {key: median_of([r[key] for r in rounds]) for key in rounds[0]}

    on_empty, on_history = rates(empty), rates(full)
    return {
        "history": fill,
        "rows_per_s_empty": on_empty,
        "rows_per_s_history": on_history,
        "ratio_history_to_empty": {
            key: round(on_history[key] / on_empty[key], 3) if on_empty[key] else None
            for key in on_empty
        },
        "admin_ms_empty": admin_empty,
        "admin_ms_history": admin_full,
    }
