"""``core.db.dict_cursor`` and ``bound_cursor``: the hot statements' cursors
read timestamps with psycopg's C loader and give the same values as Django's
own cursor, and check a kept connection before using it, as Django's does.
That check (core/postgresql/base.py) asks the server only when the socket
has something to read."""

from __future__ import annotations

import datetime as dt
import select

import psycopg
import pytest
from django.db import connection

from core.db import bound_cursor, dict_cursor
from tests.database import subprocess_database_url
from tests.polling import wait_until

pytestmark = pytest.mark.django_db

SQL = (
    "SELECT TIMESTAMPTZ '2026-03-29 00:59:59.123456+00' AS a,"
    " TIMESTAMPTZ '2026-10-25 03:30:00+02' AS b, NULL::timestamptz AS c"
)


def test_its_timestamps_are_djangos_values_read_by_psycopgs_c_loader():
    with connection.cursor() as cur:
        cur.execute(SQL)
        expected = cur.fetchone()
    with dict_cursor() as cur:
        cur.execute(SQL)
        row = cur.fetchone()
        oid = psycopg.adapters.types["timestamptz"].oid
        loader = cur.cursor.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
    assert (row["a"], row["b"], row["c"]) == expected
    assert row["a"].utcoffset() == row["b"].utcoffset() == dt.timedelta(0)
    assert row["a"].tzinfo is expected[0].tzinfo
    # Not Django's Python subclass (django.db.backends.postgresql.psycopg_any):
    # psycopg's own loader, which the binary package implements in C.
    assert loader.__module__ != "django.db.backends.postgresql.psycopg_any"
    if psycopg.pq.__impl__ == "binary":
        assert loader.__module__ == "psycopg_binary._psycopg", loader


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("prepare", [True, False], ids=["prepared", "unprepared"])
def test_a_bound_cursor_replaces_a_connection_the_server_has_closed(prepare):
    """An API request's first statement comes through a bound cursor. A
    connection kept from an earlier request may be dead (a server restart, a
    failover): the cursor checks it first, as Django's own cursor() does, and
    opens a new one rather than failing the request."""
    connection.ensure_connection()
    old_pid = connection.connection.info.backend_pid
    with psycopg.connect(subprocess_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [old_pid])
        # As after a restart or a failover: the backend has gone, its socket closed.
        wait_until(
            lambda: (
                not other.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", [old_pid]
                ).fetchone()
            ),
            message="the terminated backend to exit",
        )
    connection.health_check_done = False  # as at the start of every request
    with bound_cursor(prepare=prepare) as cur:
        cur.execute("SELECT pg_backend_pid()")
        (new_pid,) = cur.fetchone()
    assert new_pid != old_pid


def _last_statement(pid: int) -> str:
    with psycopg.connect(subprocess_database_url(), autocommit=True) as other:
        row = other.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    assert row is not None, f"backend {pid} is gone"
    return row[0]


@pytest.mark.django_db(transaction=True)
def test_a_sound_kept_connection_is_checked_without_a_round_trip():
    """Each request's check of a kept connection sends nothing while the
    socket has nothing to read: the backend's last statement is still the
    request before's, not Django's ``SELECT 1``, and the connection is kept."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with connection.cursor() as cur:
        cur.execute("SELECT 'the request before'")
    connection.health_check_done = False  # as at the start of every request
    with bound_cursor() as cur:
        assert _last_statement(pid) == "SELECT 'the request before'"
        cur.execute("SELECT pg_backend_pid()")
        assert cur.fetchone() == (pid,)


@pytest.mark.django_db(transaction=True)
def test_a_kept_connection_with_something_to_read_is_asked_and_kept_when_it_answers():
    """A notification that arrived between requests makes the socket
    readable on a sound connection: the check asks the server (Django's
    ``SELECT 1``), which answers, and the connection is kept."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with connection.cursor() as cur:
        cur.execute("LISTEN punctual_health_check_test")
    try:
        with psycopg.connect(subprocess_database_url(), autocommit=True) as other:
            other.execute("NOTIFY punctual_health_check_test")
        sock = connection.connection.fileno()
        wait_until(
            lambda: select.select([sock], [], [], 0)[0], message="the notification to arrive"
        )
        connection.health_check_done = False  # as at the start of every request
        with bound_cursor() as cur:
            assert _last_statement(pid) == "SELECT 1"
            cur.execute("SELECT pg_backend_pid()")
            assert cur.fetchone() == (pid,)
    finally:
        with connection.cursor() as cur:
            cur.execute("UNLISTEN *")


@pytest.mark.django_db(transaction=True)
def test_is_usable_still_asks_the_server():
    """Outside a request's check, ``is_usable()`` is Django's round trip: the
    loops ask it whether the database is reachable after a failed statement,
    and behind a pooler the socket stays quiet while the server is gone."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with connection.cursor() as cur:
        cur.execute("SELECT 'the statement before'")
    assert connection.is_usable()
    assert _last_statement(pid) == "SELECT 1"
