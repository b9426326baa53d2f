"""The database clock and its test-only offset (core/db.py DB_NOW_SQL)."""

import datetime as dt

import pytest
from django.db import connection

from core.db import db_now
from dispatch.dispatcher import Dispatcher

pytestmark = pytest.mark.django_db


def test_db_now_follows_an_injected_offset_and_only_it():
    before = db_now()
    with connection.cursor() as cur:
        cur.execute("SET LOCAL punctual.clock_offset = '1 day'")
    shifted = db_now()
    assert dt.timedelta(hours=23, minutes=59) < shifted - before < dt.timedelta(days=1, minutes=1)
    with connection.cursor() as cur:
        cur.execute("SET LOCAL punctual.clock_offset = ''")
    assert db_now() - before < dt.timedelta(minutes=1)


def test_the_dispatcher_sleep_reads_the_same_clock(owner):
    from tests.factories import make_job

    make_job(owner, interval_seconds=3600)  # next fire about an hour from now
    assert Dispatcher().seconds_until_next_fire() > 0.5
    with connection.cursor() as cur:
        cur.execute("SET LOCAL punctual.clock_offset = '2 hours'")
    # Two hours later by the database clock, the fire is overdue: no sleep.
    assert Dispatcher().seconds_until_next_fire() < 0.1
