"""Small helpers around the database connection that every app uses.

Punctual's rule (docs/design/guarantees.md "Database time"): whether a fire is
due and whether a lease has expired is decided by the database clock.
``db_now()`` reads it; tests and benchmarks may pass an explicit time to the
functions that take ``now=``.

The hot paths use raw SQL (``dispatch/queries.py``, ``runs/leases.py``,
``runs/outcomes.py``). They read rows by column name through ``dict_cursor()``.
psycopg already returns ``uuid.UUID`` and aware UTC datetimes (Django sets the
session time zone to UTC), so no value needs converting.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections, models, transaction
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models.fields import AutoFieldMixin
from psycopg.rows import dict_row, tuple_row
from psycopg.types.datetime import TimestamptzLoader

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


# JIT, off for every hot statement: the dispatcher's tick, the claims
# (worker and pull API), heartbeats, releases, completions and the API's
# creates. PostgreSQL JIT-compiles a statement whose estimated cost passes
# ``jit_above_cost`` (100,000 by default), on every execution, for seconds of
# CPU: worth it for an analytic query, never for these, which each touch a
# batch of rows. Debian's, PGDG's and most managed servers are built with
# LLVM and have JIT on; the embedded server has none.
#
# On a direct connection the session has it off from its start (settings:
# ``JIT_OFF_OPTION``, a libpq startup option), which costs nothing per
# transaction. Behind a transaction pooler (``PUNCTUAL_TRANSACTION_POOLER``)
# each transaction may run on another server session, whose settings are not
# ours, so every hot transaction's first statement is NO_JIT, which lasts
# until the transaction ends.
NO_JIT = "SET LOCAL jit = off"


def jit_off_per_transaction(using: str = "default") -> bool:
    """Whether hot transactions must turn JIT off themselves: behind a
    transaction pooler, or on a connection whose settings do not start its
    session with it off."""
    options = connections[using].settings_dict.get("OPTIONS", {}).get("options", "")
    return settings.PUNCTUAL_TRANSACTION_POOLER or settings.JIT_OFF_OPTION not in options


@contextmanager
def hot_transaction(using: str = "default", *, savepoint: bool = True) -> Iterator[None]:
    """``transaction.atomic()`` for statements on a hot path: inside it no
    statement is JIT-compiled, whatever the server's settings (``NO_JIT``).
    Nested in a transaction, it sets the outer transaction's (``SET LOCAL``
    lasts until the outermost one ends)."""
    with transaction.atomic(using=using, savepoint=savepoint):
        if jit_off_per_transaction(using):
            with connections[using].cursor() as cur:
                cur.execute(NO_JIT)
        yield


def hot_statement(using: str = "default", *, savepoint: bool = True):
    """For one statement on a hot path that is atomic alone (an API create):
    in autocommit where the session has JIT off (no BEGIN and COMMIT round
    trips), else in a ``hot_transaction``; inside a caller's transaction,
    always a ``hot_transaction`` (a savepoint if ``savepoint``)."""
    conn = connections[using]
    if conn.in_atomic_block or jit_off_per_transaction(using):
        return hot_transaction(using, savepoint=savepoint)
    return contextlib.nullcontext()


def db_now(using: str = "default") -> dt.datetime:
    """The database's current time, as an aware UTC datetime."""
    with connections[using].cursor() as cur:
        cur.execute(f"SELECT {DB_NOW_SQL}")
        return cur.fetchone()[0].astimezone(dt.UTC)


class _BoundCursor(psycopg.Cursor):
    """psycopg's server-binding cursor, which prepares its statements or
    never does (``prepare``), whatever psycopg's ``prepare_threshold``
    would do. Django's cursor wrapper calls ``execute(sql, params)``, with no
    way to ask, so the choice is the cursor's."""

    prepare = False

    def execute(self, query, params=None, *, prepare=None, binary=None):
        prepare = self.prepare if prepare is None else prepare
        return super().execute(query, params, prepare=prepare, binary=binary)


class _PreparingCursor(_BoundCursor):
    prepare = True


class _LoggedBoundCursor(CursorDebugWrapper):
    """Django's query log (tests, DEBUG) for a bound cursor: each statement
    as written. Django's own reads it back from psycopg, which keeps no copy
    of a statement it ran prepared."""

    def execute(self, sql, params=None):
        with self.debug_sql(sql, params):
            return CursorWrapper.execute(self, sql, params)


@contextmanager
def bound_cursor(
    using: str = "default", *, prepare: bool = False, row_factory: Any = tuple_row
) -> Iterator[CursorWrapper]:
    """A cursor that binds its parameters on the server, unlike the ORM's
    cursors: the hot statements pass arrays of thousands of ids and times,
    which a client-side cursor would quote into the SQL text element by
    element (and the server would parse back). Server-side binding sends them
    as parameters. It is still Django's connection and transaction, wrapped
    as Django wraps its own cursors (database errors, query logging in tests).

    With ``prepare``, each statement is prepared on the server the first
    time this connection runs it, and from then on only its parameters are
    sent: the server neither parses nor plans it again. That is for the
    statements of every API request, whose planning cost more than their
    running: preparing a single create's four statements about halved
    PostgreSQL's CPU per create. Only statements whose best plan does not
    depend on their parameters' values should ask: after five runs
    PostgreSQL may keep one generic plan, made without the values, for all
    of them. Behind a transaction pooler nothing is prepared, ``prepare`` or
    not (``PUNCTUAL_TRANSACTION_POOLER`` sets psycopg's ``prepare_threshold``
    to None: docs/operating/poolers.md).

    Its ``timestamptz`` values are read by psycopg's own loader, which is C.
    Django's connection reads them with a Python subclass of it (to attach
    its time zone): 14.5 us a row of four timestamps against 1.4 us, and a
    claim's rows carry four. Both give aware datetimes of the same instant,
    in UTC (the session time zone Django sets).
    """
    conn = connections[using]
    # As Django's own cursor() does: the first cursor of a request checks a
    # kept connection (CONN_HEALTH_CHECKS) and opens a new one if the server
    # went away since, or after a failover. An API request's first
    # statement (its token lookup) comes through here.
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    kind = _PreparingCursor if prepare else _BoundCursor
    # Typed Any: django-stubs expects Django's wrapper here, the runtime the DB-API cursor.
    raw: Any = kind(conn.connection, row_factory=row_factory)
    # Registering psycopg's Python class selects its C twin.
    raw.adapters.register_loader("timestamptz", TimestamptzLoader)
    cur = _LoggedBoundCursor(raw, conn) if conn.queries_logged else conn.make_cursor(raw)
    with cur:
        yield cur


@contextmanager
def dict_cursor(using: str = "default") -> Iterator[CursorWrapper]:
    """A ``bound_cursor`` whose rows are dicts keyed by column name
    (psycopg's dict_row), for the dispatcher's and the workers' statements.
    It prepares nothing: their plans depend on their parameters (how many
    runs a claim may take, how far a time range reaches into the day
    partitions)."""
    with bound_cursor(using, row_factory=dict_row) as cur:
        yield cur


def _json_value(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"insert_rows cannot send a {type(value).__name__}")


def insert_rows(objs: Sequence[models.Model], using: str = "default") -> None:
    """Insert new rows of one model in one statement with one parameter: the
    rows as a JSON array, which PostgreSQL expands into typed rows
    (``jsonb_to_recordset``).

    For wide rows in bulk (a bulk create of jobs): ``bulk_create`` binds an
    array per column, and quoting 30 arrays of 1,000 values client-side costs
    several times the insert itself. Each value goes through its field's
    ``pre_save`` (``auto_now`` and the like), as with ``bulk_create``. An
    auto-increment primary key is left to the database and not read back;
    any other primary key must be set.
    """
    if not objs:
        return
    sql, rows = rows_insert(objs, "%s", using)
    with connections[using].cursor() as cur:
        cur.execute(sql, [rows])
    rows_inserted(objs, using)


def rows_insert(
    objs: Sequence[models.Model], placeholder: str, using: str = "default"
) -> tuple[str, str]:
    """``insert_rows``' statement, to run alone or as a part of a larger one
    (a ``WITH`` clause), and its parameter: the rows as JSON, for
    ``placeholder`` (``%s`` or ``%(name)s``). Call ``rows_inserted`` once it ran."""
    fields, names, sql = _rows_insert_shape(type(objs[0]), using)
    rows = [
        {name: f.pre_save(obj, add=True) for name, f in zip(names, fields, strict=True)}
        for obj in objs
    ]
    rows_json = json.dumps(rows, default=_json_value, separators=(",", ":"))
    return sql.replace("<rows>", placeholder), rows_json


@functools.cache
def _rows_insert_shape(
    model: type[models.Model], using: str
) -> tuple[list[models.Field], list[str], str]:
    """``rows_insert``'s fields, their columns and its statement for ``model``,
    with ``<rows>`` where the parameter goes: the same for every insert, and
    asking each field its column type was a twentieth of a single create."""
    meta = model._meta
    connection = connections[using]
    quote = connection.ops.quote_name
    fields = [
        f for f in meta.concrete_fields if not (f.primary_key and isinstance(f, AutoFieldMixin))
    ]
    names = [str(f.column) for f in fields]  # a concrete field always has its column
    columns = ", ".join(quote(name) for name in names)
    types = ", ".join(
        f"{quote(name)} {f.db_type(connection)}" for name, f in zip(names, fields, strict=True)
    )
    # Values are never spliced into the SQL: only column names and types
    # from the model, and the rows as the one parameter.
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns})"
        f" SELECT {columns} FROM jsonb_to_recordset(<rows>::jsonb) AS r({types})"
    )
    return fields, names, sql


def rows_inserted(objs: Sequence[models.Model], using: str = "default") -> None:
    """Mark ``objs`` as saved, as ``Model.save`` does, once their insert ran."""
    for obj in objs:
        obj._state.adding = False
        obj._state.db = using


def delete_oldest(
    model: type[models.Model], cutoff: dt.datetime, limit: int, using: str = "default"
) -> int:
    """Delete up to ``limit`` rows of ``model`` whose ``created_at`` is before
    ``cutoff``, oldest first; returns how many went.

    For append-only tables that expire by age (the audit log, the stored
    Idempotency-Key answers): the ``created_at`` index finds the oldest rows,
    ``SKIP LOCKED`` lets several pruners take disjoint batches, and the
    ``limit`` keeps each statement, and the row locks it holds until its
    transaction ends, short whatever the table's size.
    """
    meta = model._meta
    assert meta.pk is not None  # a concrete model always has its key
    connection = connections[using]
    table = connection.ops.quote_name(meta.db_table)
    key = connection.ops.quote_name(str(meta.pk.column))
    with connection.cursor() as cur:
        # The batch is chosen once, in a materialized CTE: as a plain
        # ``IN (subquery)`` the planner may run the subquery again for a
        # semi-join, and each run can pick other rows, so the LIMIT would
        # not bound the delete.
        cur.execute(
            f"WITH batch AS MATERIALIZED (SELECT {key} FROM {table} WHERE created_at < %s"
            " ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED)"
            f" DELETE FROM {table} t USING batch WHERE t.{key} = batch.{key}",
            [cutoff, limit],
        )
        return cur.rowcount
