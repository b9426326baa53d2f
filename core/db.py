"""Small helpers around the database connection that every app uses.

Punctual's rule (README "What it guarantees"): whether a fire is due and whether a lease
has expired is decided by the database clock. ``db_now()`` reads it; tests and
benchmarks may pass an explicit time to the functions that take ``now=``.

The hot paths use raw SQL (``dispatch/queries.py``, ``runs/leases.py``,
``runs/outcomes.py``). They read rows by column name through ``dict_cursor()``.
psycopg already returns ``uuid.UUID`` and aware UTC datetimes (Django sets the
session time zone to UTC), so no value needs converting.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from django.db import connections
from psycopg.rows import dict_row

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper


# The database clock, as every due and lease decision reads it.
# statement_timestamp(), not now(): now() is frozen at the start of the
# transaction, and callers may be inside a long-lived one.
#
# ``punctual.clock_offset`` is fault injection for tests, never set in
# production: an interval added to the database clock, for one session
# (``SET punctual.clock_offset = '24 hours'``) or for every new connection of
# a database (``ALTER DATABASE … SET punctual.clock_offset = …``). It is how
# the tests jump the clock by hours ("the dispatcher was down for a day")
# without waiting, for every process at once.
DB_NOW_SQL = (
    "(statement_timestamp()"
    " + coalesce(nullif(current_setting('punctual.clock_offset', true), ''), '0')::interval)"
)


def db_now(using: str = "default") -> dt.datetime:
    """The database's current time, as an aware UTC datetime."""
    with connections[using].cursor() as cur:
        cur.execute(f"SELECT {DB_NOW_SQL}")
        return cur.fetchone()[0].astimezone(dt.UTC)


@contextmanager
def dict_cursor(using: str = "default") -> Iterator[CursorWrapper]:
    """A cursor whose rows are dicts keyed by column name (psycopg's dict_row).

    It binds parameters on the server, unlike the ORM's cursors: the hot
    statements pass arrays of thousands of ids and times, which a client-side
    cursor would quote into the SQL text element by element (and the server
    would parse back). Server-side binding sends them as parameters. It is
    still Django's connection and transaction, wrapped as Django wraps its own
    cursors (database errors, query logging in tests).
    """
    conn = connections[using]
    conn.ensure_connection()
    # Typed Any: django-stubs expects Django's wrapper here, the runtime the DB-API cursor.
    raw: Any = psycopg.Cursor(conn.connection, row_factory=dict_row)
    cur = conn.make_debug_cursor(raw) if conn.queries_logged else conn.make_cursor(raw)
    with cur:
        yield cur
