"""Every API request's own statements are prepared on the server, and the
dispatcher's and the workers' are not (core/db.py ``bound_cursor``).

Prepared: the token lookup and the rate count of every request, and a
create's context and insert. The server then neither parses nor plans them
again; ``pg_prepared_statements`` counts each one's runs (its custom and
generic plans). The dispatcher's and the workers' statements, whose plans
depend on their parameters, stay unprepared. Behind a transaction pooler
nothing is prepared: tests/processes/test_pooler.py.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from core.db import dict_cursor
from tests.integration.api.support import PUBLIC_URL

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
CREATES = 4

# A fragment of each statement a single create asks to be prepared.
PREPARED_BY_A_CREATE = {
    "token lookup": "FROM accounts_apitoken AS t",
    "rate count": "INSERT INTO punctual_rate_counts",
    "create context": "LEFT JOIN jobs_ownerlimits AS o",
    "insert": 'INSERT INTO "jobs_job"',
}


def prepared() -> dict[str, int]:
    """This connection's prepared statements, each with its runs so far."""
    with connection.cursor() as cur:
        cur.execute("SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements")
        return dict(cur.fetchall())


def test_a_direct_connection_may_prepare():
    assert not getattr(settings, "PUNCTUAL_TRANSACTION_POOLER", False)
    assert settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"] is not None


def test_single_creates_run_their_statements_prepared(api):
    before = prepared()
    for i in range(CREATES):
        answer = api.post(
            JOBS, {"name": f"prepared-{i}", "interval_seconds": 60, "url": PUBLIC_URL}, "json"
        )
        assert answer.status_code == 201, answer.content
    runs = {statement: n - before.get(statement, 0) for statement, n in prepared().items()}
    for what, fragment in PREPARED_BY_A_CREATE.items():
        matching = [n for statement, n in runs.items() if fragment in statement]
        # One prepared statement, run by every create: prepared once, then reused.
        assert matching == [CREATES], (what, runs)


def test_the_hot_loops_statements_are_not_prepared():
    statement = "SELECT count(*) AS n FROM runs_run WHERE scheduled_at < %s"
    for _ in range(10):  # twice psycopg's threshold
        with dict_cursor() as cur:
            cur.execute(statement, ["2026-01-01T00:00:00Z"])
            assert cur.fetchone()["n"] == 0
    assert not [s for s in prepared() if "FROM runs_run WHERE scheduled_at" in s]
