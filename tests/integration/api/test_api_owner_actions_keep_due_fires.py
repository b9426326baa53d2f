"""Owner actions while fires are due, and the schedule history they write.

A pause, a delete or an edit that commits while fires are due (``next_fire_at``
in the past, no dispatcher there yet) must not drop them: they are planned in
the same locked transaction (runs/job_verbs.py ``settle_due_fires``). Every
state or schedule change opens a schedule-history span in database time
(jobs/history.py), and a change without one is refused at commit.
"""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from django.db import IntegrityError, InternalError, ProgrammingError, connection, transaction

from core.db import db_now
from jobs.models import Job, ScheduleSpan
from runs import leases
from runs.models import Run
from tests.admin_support import owners_group
from tests.factories import make_job, rewrite_job
from tests.integration.api.support import PUBLIC_URL

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
S = dt.timedelta(seconds=1)


def behind(job: Job, seconds: int) -> dt.datetime:
    """Make ``job`` look as if no dispatcher reached it for ``seconds``: its
    next fire lies that far in the past. Returns that fire."""
    now = db_now()
    first = now - seconds * S
    rewrite_job(job, created_at=first - job.interval_seconds * S, start_at=None, next_fire_at=first)
    return first


def states(job: Job) -> list[tuple[str, str]]:
    return list(Run.objects.filter(job=job).order_by("scheduled_at").values_list("state", "reason"))


def spans(job: Job) -> list[tuple[str, int | None, bool]]:
    return [
        (s.state, s.interval_seconds, s.ended_at is None)
        for s in ScheduleSpan.objects.filter(job=job).order_by("started_at", "id")
    ]


def test_a_pause_records_the_fires_already_due_and_none_of_them_runs(api, owner):
    job = make_job(owner, interval_seconds=10, misfire_grace_seconds=60)
    behind(job, 35)  # 4 fires due, all within grace: a dispatcher would have run them
    paused = api.post(f"{JOBS}{job.pk}/pause/", {}, format="json")
    assert paused.status_code == 200
    assert states(job) == [("skipped", "paused")] * 4
    assert not Run.objects.filter(job=job, state__in=("pending", "retrying")).exists()
    assert paused.json()["next_fire_at"] is None


def test_a_pause_after_a_long_outage_records_100_fires_and_counts_the_rest(api, owner):
    job = make_job(owner, interval_seconds=1, misfire_grace_seconds=10)
    first = behind(job, 1000)
    api.post(f"{JOBS}{job.pk}/pause/", {}, format="json")
    recorded = states(job)
    # At most 100 misfires recorded (the cap), the ones within grace skipped
    # by the pause, and every other fire counted: none is lost.
    assert 0 < recorded.count(("missed", "past grace")) <= 100
    assert {r for r in recorded if r[0] != "missed"} == {("skipped", "paused")}
    last = Run.objects.filter(job=job).latest("scheduled_at").scheduled_at
    answer = api.get(f"{JOBS}{job.pk}/").json()
    assert answer["missed_count"] + len(recorded) == (last - first) // S + 1
    assert answer["missed_since"] == first.isoformat().replace("+00:00", "Z")
    closed = ScheduleSpan.objects.get(job=job, state="active")
    assert closed.missed_count == answer["missed_count"]


def test_a_delete_records_the_fires_already_due(api, owner):
    job = make_job(owner, interval_seconds=10, misfire_grace_seconds=60)
    behind(job, 25)
    assert api.delete(f"{JOBS}{job.pk}/").status_code == 204
    assert states(job) == [("skipped", "deleted")] * 3
    assert spans(job) == [("active", 10, False), ("deleted", 10, True)]


def test_an_edit_plans_the_old_schedule_s_due_fires_then_follows_the_new_one(api, owner):
    job = make_job(owner, interval_seconds=10, misfire_grace_seconds=60)
    first = behind(job, 25)
    answer = api.patch(f"{JOBS}{job.pk}/", {"interval_seconds": 3600}, format="json")
    assert answer.status_code == 200
    runs = list(Run.objects.filter(job=job).order_by("scheduled_at"))
    # The three fires the old schedule made due, planned as the dispatcher
    # would have (one runs; no dispatcher reached the others in time, and the
    # first now holds them back).
    assert [r.scheduled_at for r in runs] == [first + k * 10 * S for k in range(3)]
    assert [(r.state, r.reason) for r in runs] == [
        ("pending", ""),
        ("missed", "no dispatcher"),
        ("missed", "no dispatcher"),
    ]
    job.refresh_from_db()
    assert job.next_fire_at > db_now() + 3000 * S
    assert spans(job) == [("active", 10, False), ("active", 3600, True)]


def test_an_edit_of_a_field_outside_the_schedule_opens_no_span(api, owner):
    job = make_job(owner)
    api.patch(f"{JOBS}{job.pk}/", {"description": "new words"}, format="json")
    assert spans(job) == [("active", 60, True)]


def test_pause_resume_and_delete_each_open_a_span_in_database_time(api, owner):
    job = make_job(owner)
    api.post(f"{JOBS}{job.pk}/pause/", {}, format="json")
    api.post(f"{JOBS}{job.pk}/resume/", {}, format="json")
    api.delete(f"{JOBS}{job.pk}/")
    rows = list(ScheduleSpan.objects.filter(job=job).order_by("started_at", "id"))
    assert [r.state for r in rows] == ["active", "paused", "active", "deleted"]
    for before, after in itertools.pairwise(rows):
        assert before.ended_at == after.started_at
    job.refresh_from_db()
    assert rows[0].started_at == job.created_at
    assert rows[-1].started_at == job.deleted_at


def test_a_target_kind_change_cancels_the_waiting_runs_so_the_new_kind_is_not_starved(api, owner):
    job = make_job(owner, target_kind="pull", url="", interval_seconds=10)
    behind(job, 5)
    from dispatch.dispatcher import Dispatcher

    Dispatcher().tick()
    waiting = Run.objects.get(job=job, state="pending")
    assert waiting.target_kind == "pull"
    answer = api.patch(
        f"{JOBS}{job.pk}/",
        {"target_kind": "webhook", "url": PUBLIC_URL},
        format="json",
    )
    assert answer.status_code == 200, answer.json()
    waiting.refresh_from_db()
    assert (waiting.state, waiting.reason) == ("cancelled", "target changed")
    # The next fire is a webhook run, and a webhook worker gets it.
    behind(Job.objects.get(pk=job.pk), 1)
    Dispatcher().tick()
    claimed = leases.claim("w1", limit=10, lease_seconds=30, now=db_now() + 60 * S)
    assert [r.job_id for r in claimed] == [job.pk]


def test_a_state_change_without_a_span_is_refused_at_commit(owner):
    job = make_job(owner)
    with (
        pytest.raises((IntegrityError, InternalError, ProgrammingError)) as refused,
        transaction.atomic(),
        connection.cursor() as cur,
    ):
        cur.execute("UPDATE jobs_job SET state = 'paused' WHERE id = %s", [job.pk])
        cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
    assert "schedule history" in str(refused.value)


def test_the_admin_job_page_shows_the_stored_missed_count(client, owner, api):
    job = make_job(owner, interval_seconds=1, misfire_grace_seconds=10)
    first = behind(job, 1000)
    api.post(f"{JOBS}{job.pk}/pause/", {}, format="json")
    job.refresh_from_db()
    assert job.missed_count > 0
    owner.is_staff = True
    owner.save()
    owner.groups.add(owners_group())
    client.force_login(owner)
    page = client.get(f"/admin/jobs/job/{job.pk}/change/")
    assert page.status_code == 200
    expected = f"missed since {first:%Y-%m-%d %H:%M} UTC: {job.missed_count:,}"
    assert expected in page.content.decode()
