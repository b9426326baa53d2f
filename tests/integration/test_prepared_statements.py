"""The hot statements are prepared on the server on a direct connection, and
never through a transaction pooler (core/db.py ``dict_cursor(prepared=True)``,
README "Connection poolers")."""

from __future__ import annotations

import pytest
from django.db import connection

from runs import job_verbs, leases, outcomes
from tests.factories import make_job

# A session of its own: what it prepared is read back from pg_prepared_statements.
pytestmark = pytest.mark.django_db(transaction=True)


def claim_and_complete(owner) -> None:
    run = job_verbs.trigger(make_job(owner))
    [claimed] = leases.claim("w1", limit=10, lease_seconds=30)
    assert claimed.run_id == run.pk
    done = outcomes.complete(
        "w1",
        [
            outcomes.Result(
                run_id=run.pk,
                job_id=run.job_id,
                attempt=1,
                state="succeeded",
                status_code=200,
                scheduled_at=claimed.scheduled_at,
            )
        ],
    )
    assert done.applied == [run.pk]


def prepared_statements() -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cur.fetchall()]


def test_a_direct_connection_prepares_the_claim_and_the_completion(owner):
    connection.close()  # a fresh session
    claim_and_complete(owner)
    prepared = prepared_statements()
    # Read back with $1, $2... for their parameters: found by their SQL's own words.
    assert any("ORDER BY r.available_at" in s and leases.LOCK_RUN_AND_JOB in s for s in prepared)
    assert any("RETURNING r.id, r.scheduled_at, r.kind" in s for s in prepared)


def test_nothing_is_prepared_through_a_transaction_pooler(owner, settings):
    settings.PUNCTUAL_TRANSACTION_POOLER = True
    connection.close()  # a fresh session
    claim_and_complete(owner)
    assert prepared_statements() == []
