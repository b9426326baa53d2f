"""The fault suite: real ``dispatch`` and ``work`` processes, a real receiver,
and real faults. Every scenario ends with the fire auditor (ops/audit.py)
clean, over the scenario's whole window and with the receiver's log.

The PostgreSQL restart scenario restarts the session's private embedded
server, so it is moved to the very end of the session
(``pytest_collection_modifyitems`` below) and leaves the server up.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
from pathlib import Path

import pytest
from django.db import connection

from core.db import db_now
from dispatch.models import ProcessHeartbeat
from ops.audit import AuditReport, audit
from runs.models import ACTIVE_STATES, Run
from tests.processes.conftest import process_env, wait_until

# Debian's libfaketime package (``make faketime``), on any architecture.
LIBFAKETIME = next(
    iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))),
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
)
LAST = "test_zz_postgres_restart.py"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Run the PostgreSQL restart last in the whole session: it breaks every
    open connection to the session's server, including other tests' fixtures."""
    last = [item for item in items if item.path.name == LAST]
    if last:
        items[:] = [item for item in items if item.path.name != LAST] + last


def faketime_env(offset: str, **extra: str) -> dict[str, str]:
    """An environment whose processes see the wall clock ``offset`` off
    (libfaketime syntax: "+5m", "-5m"). The monotonic clock is left alone, so
    asyncio's and the loops' timers behave; only the application's idea of
    the time of day is wrong."""
    return process_env(
        LD_PRELOAD=str(LIBFAKETIME),
        FAKETIME=offset,
        FAKETIME_DONT_FAKE_MONOTONIC="1",
        FAKETIME_NO_CACHE="1",
        **extra,
    )


def named(env: dict[str, str], name: str) -> dict[str, str]:
    """``env`` with the process's database connection labelled ``name``
    (pg_stat_activity.application_name), so a test can see its transactions."""
    env = dict(env)
    separator = "&" if "?" in env["DATABASE_URL"] else "?"
    env["DATABASE_URL"] += f"{separator}application_name={name}"
    return env


def in_transaction(name: str, *patterns: str) -> bool:
    """The process labelled ``name`` is inside a transaction whose latest
    statement matches one of the LIKE ``patterns``: a SIGKILL now lands
    before that transaction commits (or within the instant it takes to).
    Only this test's database counts: the tier runs in parallel (xdist), each
    worker with a database of its own on the one server, and other workers'
    processes may carry the same names."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND xact_start IS NOT NULL AND query LIKE ANY(%s)",
            [name, list(patterns)],
        )
        return cur.fetchone() is not None


def libfaketime_missing() -> str | None:
    if LIBFAKETIME.exists():
        return None
    hint = "install it with `make faketime` (apt-get install libfaketime)"
    return f"libfaketime is not installed at {LIBFAKETIME}: {hint}"


def registered(name: str) -> bool:
    """The process called ``name`` has written its first fleet heartbeat."""
    return ProcessHeartbeat.objects.filter(name=name).exists()


def active_runs(jobs) -> int:
    return Run.objects.filter(job__in=jobs, state__in=ACTIVE_STATES).count()


def drain(jobs, timeout: float = 60.0, message: str = "every run to finish") -> None:
    """Wait until no run of ``jobs`` is pending, running or retrying."""
    wait_until(lambda: active_runs(jobs) == 0, timeout=timeout, interval=0.2, message=message)


def stop_all(processes, procs, sig: int = signal.SIGTERM) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(sig)
    for proc in procs:
        proc.wait(timeout=60)


def assert_audit_clean(
    since: dt.datetime,
    *,
    receiver=None,
    jobs=None,
    until: dt.datetime | None = None,
    tolerance: dt.timedelta = dt.timedelta(seconds=5),
    by_design: frozenset[str] = frozenset(),
) -> AuditReport:
    """The auditor over [since, until) finds nothing, but for the rules in
    ``by_design``: what the scenario itself makes (a scenario that starts
    no worker leaves its runs waiting, and ``no worker`` says so). Its
    report is printed (pytest shows it with -s, or when the test fails)."""
    if receiver is not None:
        receiver.flush()  # the log holds every delivery made so far
    report = audit(
        since,
        until,
        job_ids=[j.pk for j in jobs] if jobs is not None else None,
        receiver_log=receiver.log_path if receiver is not None else None,
        tolerance=tolerance,
    )
    print(report.render())
    unexpected = [v for v in report.violations if v.rule not in by_design]
    assert not unexpected, report.render()
    assert report.counts["slots"] > 0 or report.counts["runs"] > 0, "the audit saw nothing"
    return report


@pytest.fixture
def since(db):
    """The database time at the start of the scenario: the audit window's start."""
    return db_now() - dt.timedelta(seconds=1)


@pytest.fixture
def private_server() -> Path:
    """The data directory of the session's own embedded PostgreSQL, which a
    scenario may stop and start; or skip, when DATABASE_URL names a server this
    session does not own (a shared server is never restarted)."""
    data_dir = os.environ.get("PUNCTUAL_TEST_PGDATA")
    if not data_dir:
        message = (
            "DATABASE_URL names a server this session does not own; the restart scenario"
            " restarts only the session's private embedded PostgreSQL (unset DATABASE_URL)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return Path(data_dir)
