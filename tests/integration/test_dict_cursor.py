"""``core.db.dict_cursor`` and ``bound_cursor``: the hot statements' cursors
read timestamps with psycopg's C loader and give the same values as Django's
own cursor, and check a kept connection before using it, as Django's does."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.db import connection

from core.db import bound_cursor, dict_cursor
from tests.database import subprocess_database_url

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
    connection.health_check_done = False  # as at the start of every request
    with bound_cursor(prepare=prepare) as cur:
        cur.execute("SELECT pg_backend_pid()")
        (new_pid,) = cur.fetchone()
    assert new_pid != old_pid
