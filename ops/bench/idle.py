"""The ``idle`` scenario: W idle ``manage.py work`` processes (default 50),
nothing due: the database's transactions per second over a window
(pg_stat_database; statements too when pg_stat_statements is loaded), in all
and per worker; then the wake-up latency, from a manual trigger's commit to
its run's claim, over K triggers. ``PUNCTUAL_LISTEN=false`` in the bench's
environment measures a polling fleet instead (not part of ``all``)."""

from __future__ import annotations

import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import QuerySet

from ops.bench import BenchFailed, processes
from ops.bench.figures import percentile
from ops.bench.scratch import BENCH_OWNER, insert_jobs, reset

if TYPE_CHECKING:
    from jobs.models import Job

# The database's transactions so far (the bench's own few are counted too).
DATABASE_XACTS = """
    SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()
"""
# The statements run so far, when pg_stat_statements is installed and loaded.
STATEMENT_CALLS = """
    SELECT sum(calls)::bigint FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def _database_counters() -> tuple[int, int | None]:
    """(transactions, statements or None), read afresh: statistics are
    cached per transaction, and this connection is in autocommit."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(DATABASE_XACTS)
        xacts = cur.fetchone()[0]
        cur.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'")
        if not cur.fetchone():
            return xacts, None
        try:
            with transaction.atomic():
                cur.execute(STATEMENT_CALLS)
                return xacts, cur.fetchone()[0]
        except DatabaseError:
            return xacts, None  # installed, but not in shared_preload_libraries


def _wait_for(predicate, timeout: float, what: str, procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a process exited while waiting for {what}")
        time.sleep(0.05)


# LISTEN connections of the bench's workers (dispatch/wakeup.py names them).
IDLE_LISTENERS = """
    SELECT count(*) FROM pg_stat_activity
    WHERE application_name LIKE 'punctual-listen bench-idle-%%' AND query ILIKE 'LISTEN %%'
"""


def _check_connections_for(workers: int) -> None:
    """Refuse at once, naming the setting, when the server cannot take the
    fleet's connections: each worker holds two (its database connection and
    its LISTEN connection). Otherwise the workers fail to connect and the
    bench would wait out its timeouts."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT current_setting('max_connections')::int"
            " - current_setting('superuser_reserved_connections')::int"
            " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        )
        free = cur.fetchone()[0]
    needed = 2 * workers
    if free < needed:
        raise BenchFailed(
            f"{workers} idle workers need {needed} connections and the server has {free}"
            " free: raise max_connections (ALTER SYSTEM SET max_connections = ..., then"
            " restart it) or ask for fewer --workers"
        )


def scenario_idle(*, workers: int, window: float, wakeups: int, force: bool) -> dict:
    """What an idle fleet costs the database, and how fast it wakes up."""
    from dispatch.models import ProcessHeartbeat
    from jobs.models import Job

    reset(force)
    _check_connections_for(workers)
    fleet = ProcessHeartbeat.objects.filter(name__startswith="bench-idle-")
    fleet.delete()
    with tempfile.TemporaryDirectory(prefix="punctual-bench-") as tmp_name:
        tmp = Path(tmp_name)
        receiver, port, _log = processes.start_receiver(tmp)
        insert_jobs(1, interval=86_400, url=f"http://127.0.0.1:{port}/ok", overlap="allow")
        job = Job.objects.get(owner__username=BENCH_OWNER)
        procs = [
            processes.start(
                ["manage.py", "work", "--concurrency", "10", "--name", f"bench-idle-{k}"],
                tmp / f"work{k}.out",
            )
            for k in range(workers)
        ]
        try:
            _wait_until_idle(fleet, workers, procs)
            xacts0, calls0 = _database_counters()
            t0 = time.monotonic()
            time.sleep(window)
            xacts1, calls1 = _database_counters()
            elapsed = time.monotonic() - t0
            latencies = _wakeup_latencies(job, wakeups, procs)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                processes.stop(p)
            processes.stop(receiver)
    if len(latencies) != wakeups:  # not an assert: python -O must not skip it
        raise RuntimeError(f"{len(latencies)} of {wakeups} wake-ups measured")
    xacts_per_s = (xacts1 - xacts0) / elapsed
    calls_per_s = None if calls0 is None or calls1 is None else (calls1 - calls0) / elapsed
    return {
        "listen": settings.PUNCTUAL_LISTEN,
        "poll_seconds": settings.PUNCTUAL_POLL_SECONDS if settings.PUNCTUAL_LISTEN else 0.1,
        "window_s": round(elapsed, 1),
        "transactions_per_s": round(xacts_per_s, 1),
        "transactions_per_s_per_worker": round(xacts_per_s / workers, 2),
        "statements_per_s": None if calls_per_s is None else round(calls_per_s, 1),
        "statements_per_s_per_worker": (
            None if calls_per_s is None else round(calls_per_s / workers, 2)
        ),
        "wakeup_ms": {
            "p50": round(max(0.0, statistics.median(latencies)), 1),
            "p95": round(max(0.0, percentile(latencies, 0.95)), 1),
            "max": round(max(0.0, *latencies), 1),
        },
        "wakeups": len(latencies),
        "claims_begun_before_commit": sum(1 for ms in latencies if ms < 0),
    }


def _wait_until_idle(fleet: QuerySet, workers: int, procs: list[subprocess.Popen]) -> None:
    """Until every worker has its fleet row (and its LISTEN connection, when
    workers listen), and past every worker's start-up claims."""
    _wait_for(lambda: fleet.count() >= workers, 600, f"{workers} workers' fleet rows", procs)
    if settings.PUNCTUAL_LISTEN:

        def listening() -> bool:
            with connection.cursor() as cur:
                cur.execute(IDLE_LISTENERS)
                return cur.fetchone()[0] >= workers

        _wait_for(listening, 600, f"{workers} LISTEN connections", procs)
    time.sleep(2)  # past every worker's start-up claims


def _wakeup_latencies(job: Job, wakeups: int, procs: list[subprocess.Popen]) -> list[float]:
    """Trigger ``job`` ``wakeups`` times, one run at a time: milliseconds from
    each trigger's commit to its run's claim."""
    from runs import job_verbs
    from runs.models import Run

    latencies: list[float] = []
    for _ in range(wakeups):
        with transaction.atomic():
            run = job_verbs.trigger(job)
            with connection.cursor() as cur:
                cur.execute("SELECT clock_timestamp()")  # the last statement before commit
                committed = cur.fetchone()[0]
        claimed = Run.objects.filter(pk=run.pk, started_at__isnull=False)
        _wait_for(claimed.exists, 120, "a triggered run to be claimed", procs)
        started = claimed.values_list("started_at", flat=True).get()
        # Negative when a polling claim read its clock before the
        # commit and ran its query after: counted, and as 0.
        latencies.append((started - committed).total_seconds() * 1000)
        succeeded = Run.objects.filter(pk=run.pk, state="succeeded")
        _wait_for(succeeded.exists, 120, "a triggered run to succeed", procs)
        time.sleep(0.2)  # the worker that delivered it goes idle again
    return latencies
