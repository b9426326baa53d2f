"""``core.db.dict_cursor``: the hot statements' cursor reads timestamps with
psycopg's C loader and gives the same values as Django's own cursor."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from django.db import connection

from core.db import dict_cursor

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
