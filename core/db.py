"""Small helpers around the database connection that every app uses.

Punctual's rule (PRODUCT.md §1.5): whether a fire is due and whether a lease
has expired is decided by the database clock. ``db_now()`` reads it; tests and
benchmarks may pass an explicit time to the functions that take ``now=``.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.db import connections

UTC = dt.UTC


def is_postgres(using: str = "default") -> bool:
    return connections[using].vendor == "postgresql"


def db_now(using: str = "default") -> dt.datetime:
    """The database's current time, as an aware UTC datetime."""
    conn = connections[using]
    with conn.cursor() as cur:
        if conn.vendor == "postgresql":
            # statement_timestamp(), not now(): now() is frozen at the start of
            # the transaction, and callers may be inside a long-lived one.
            cur.execute("SELECT statement_timestamp()")
            return cur.fetchone()[0].astimezone(UTC)
        cur.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        return dt.datetime.fromisoformat(cur.fetchone()[0]).replace(tzinfo=UTC)


# -- raw-SQL value adapters ------------------------------------------------
# The hot paths use raw SQL (see dispatch/queries.py and runs/leases.py). On
# PostgreSQL psycopg passes uuid and timestamptz values as they are; on SQLite
# Django stores UUIDs as 32 hex characters and datetimes as naive UTC text, so
# raw SQL has to speak that format too.


def adapt_dt(value: dt.datetime | None, using: str = "default") -> object:
    if value is None or is_postgres(using):
        return value
    return connections[using].ops.adapt_datetimefield_value(value)


def adapt_uuid(value, using: str = "default") -> object:
    if value is None or is_postgres(using):
        return value
    return value.hex if hasattr(value, "hex") else str(value).replace("-", "")


def parse_dt(value) -> dt.datetime | None:
    """A datetime read by raw SQL, as an aware UTC datetime."""
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromisoformat(value)
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


def parse_uuid(value) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
