"""The runs list answers: what missed, what is late, what is running where
with which lease, what failed and why. Attempts inline, a retry action, and a
paginator that never counts the table."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.db import db_now
from core.paginators import LookaheadPaginator
from jobs.models import JobEvent
from runs.models import Run
from tests.admin_support import add_attempt, make_run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

LIST = reverse("admin:runs_run_changelist")


def listed(client, **params) -> list[str]:
    """The run ids on the page, in order."""
    response = client.get(LIST, params)
    assert response.status_code == 200
    return re.findall(
        r'<th class="field-scheduled"><a href="/admin/runs/run/([0-9a-f-]+)/change/',
        response.content.decode(),
    )


@pytest.fixture
def zoo(ann):
    """One run for every question the list answers."""
    job = make_job(ann, name="zoo")
    pull = make_job(ann, name="zoo-pull", target_kind="pull", url="")
    now = db_now()
    runs = {
        "missed": make_run(job, state="missed", ago=900, reason="past grace"),
        "failed": make_run(
            job, state="failed", ago=800, last_status_code=500, last_error="Internal Server Error"
        ),
        "late_done": make_run(job, state="succeeded", ago=700, lag_seconds=12.0),
        "on_time": make_run(job, state="succeeded", ago=600, lag_seconds=0.2),
        "running": make_run(
            job,
            state="running",
            ago=30,
            lease_owner="worker-a",
            lease_until=now + dt.timedelta(seconds=25),
        ),
        "expired": make_run(
            job,
            state="running",
            ago=500,
            lease_owner="worker-b",
            lease_until=now - dt.timedelta(seconds=40),
            exclusive=False,  # a second running run of the job: overlap "allow"
        ),
        "retrying": make_run(job, state="retrying", ago=400, last_status_code=503),
        "waiting_late": make_run(job, state="pending", ago=60),
        "waiting_fresh": make_run(
            job, state="pending", ago=-30, available_at=now + dt.timedelta(seconds=30)
        ),
        "manual": make_run(pull, state="succeeded", ago=100, kind="manual"),
    }
    return {name: str(run.pk) for name, run in runs.items()}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("missed", ["missed"]),
        ("failed", ["failed"]),
        ("running", ["running", "expired"]),
        ("lease_expired", ["expired"]),
        ("retrying", ["retrying"]),
        ("late", ["waiting_late", "late_done"]),
        ("pending", ["waiting_fresh", "waiting_late"]),
    ],
)
def test_status_filters_answer_the_owners_questions(ann_client, zoo, status, expected):
    assert listed(ann_client, status=status) == [zoo[name] for name in expected]


def test_kind_filter(ann_client, zoo):
    assert listed(ann_client, kind__exact="manual") == [zoo["manual"]]


def test_the_list_is_newest_first(ann_client, zoo):
    assert listed(ann_client)[0] == zoo["waiting_fresh"]
    assert listed(ann_client)[-1] == zoo["missed"]


def test_columns_show_lag_duration_worker_lease_and_why(ann_client, zoo):
    page = ann_client.get(LIST).content.decode()
    running = ann_client.get(LIST, {"status": "running"}).content.decode()

    def row(name: str, page: str = page) -> str:
        """The run's row, non-breaking spaces (inside durations) read as spaces."""
        found = re.search(rf"<tr>(?:(?!</tr>).)*{zoo[name]}(?:(?!</tr>).)*</tr>", page, re.S)
        return found.group(0).replace("\xa0", " ")

    assert "+12 s" in row("late_done") and "punctual-late" in row("late_done")
    assert re.search(r"waiting 1 min|waiting 60 s", row("waiting_late"))
    # The worker and the lease are columns of the running runs' list only.
    assert "column-worker" not in page and "column-lease" not in page
    assert "worker-a" in row("running", running)
    assert re.search(r"\d+ s left", row("running", running))
    assert "worker-b" in row("expired", running)
    assert re.search(r"expired 4\d s ago", row("expired", running))  # 40 s, read a moment later
    assert "HTTP 500: Internal Server Error" in row("failed")
    assert "past grace" in row("missed")
    assert "1.5 s" in row("on_time")  # finished_at - started_at
    assert "1/3" in row("failed")


def test_attempts_are_shown_inline_and_read_only(ann, ann_client):
    run = make_run(make_job(ann), state="failed", attempt=2)
    add_attempt(run, number=1, outcome="failed", status_code=503, error="Service Unavailable")
    add_attempt(run, number=2, outcome="permanent", status_code=404, worker="worker-z")
    page = ann_client.get(reverse("admin:runs_run_change", args=[run.pk])).content.decode()
    inline = re.search(r'<div class="js-inline-admin-formset.*?</fieldset>', page, re.S).group(0)
    assert "Failed (retryable)" in inline and "Failed (permanent)" in inline
    assert "Service Unavailable" in inline and "worker-z" in inline and "503" in inline
    assert re.findall(r'<input(?![^>]*type="hidden")[^>]*>', inline) == []  # nothing to edit
    assert 'name="_save"' not in page


def test_retry_action_puts_failed_and_missed_runs_back_and_leaves_others(ann, ann_client, zoo):
    response = ann_client.post(
        LIST,
        {
            "action": "retry_runs",
            "_selected_action": [zoo["failed"], zoo["missed"], zoo["on_time"]],
        },
        follow=True,
    )
    page = response.content.decode()
    assert "Retried 2 runs." in page and "Only failed and missed runs can be retried" in page
    states = dict(Run.objects.values_list("id", "state"))
    assert {str(k): v for k, v in states.items()}[zoo["failed"]] == "pending"
    assert {str(k): v for k, v in states.items()}[zoo["missed"]] == "pending"
    assert {str(k): v for k, v in states.items()}[zoo["on_time"]] == "succeeded"
    events = JobEvent.objects.filter(action="run_retried")
    assert {(e.channel, e.actor_id) for e in events} == {("admin", ann.pk)}
    assert len(events) == 2


def test_retry_button_on_a_failed_runs_page(ann_client, zoo):
    url = reverse("admin:runs_run_change", args=[zoo["failed"]])
    assert 'id="retry-run"' in ann_client.get(url).content.decode()
    ann_client.post(reverse("admin:runs_run_retry", args=[zoo["failed"]]))
    assert Run.objects.get(pk=zoo["failed"]).state == "pending"
    # Nothing to retry on a run that succeeded.
    on_time = reverse("admin:runs_run_change", args=[zoo["on_time"]])
    assert 'id="retry-run"' not in ann_client.get(on_time).content.decode()


def test_the_runs_list_runs_no_count_query(ann_client, zoo):
    for params in ({}, {"status": "failed"}, {"status": "late"}, {"p": "1"}):
        with CaptureQueriesContext(connection) as queries:
            assert ann_client.get(LIST, params).status_code == 200
        counting = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]
        assert counting == [], counting


def test_paginator_counts_only_a_few_pages_ahead(ann):
    job = make_job(ann)
    base = db_now()
    Run.objects.bulk_create(
        Run(job=job, scheduled_at=base - dt.timedelta(minutes=i), state="succeeded")
        for i in range(25)
    )
    runs = Run.objects.order_by("-scheduled_at")

    first = LookaheadPaginator(runs, 2, page_number=1)
    first.pages_ahead = 3
    assert (first.count, first.count_is_exact) == (7, False)  # 3 pages + 1 row seen
    assert first.num_pages == 4
    assert len(first.page(1).object_list) == 2

    near_end = LookaheadPaginator(runs, 2, page_number=11)
    near_end.pages_ahead = 3
    assert (near_end.count, near_end.count_is_exact) == (25, True)
    assert [r.pk for r in near_end.page(13).object_list] == [runs[24].pk]

    with CaptureQueriesContext(connection) as queries:
        assert LookaheadPaginator(runs, 2, page_number=5).count == 19  # 8 + 5 pages of 2 + 1
    [probe] = queries
    assert "COUNT" not in probe["sql"].upper() and "LIMIT" in probe["sql"].upper()


def test_a_long_list_says_more_than_instead_of_counting(ann, ann_client, monkeypatch):
    monkeypatch.setattr(admin.site._registry[Run], "list_per_page", 2)
    job = make_job(ann)
    base = db_now()
    Run.objects.bulk_create(
        Run(job=job, scheduled_at=base - dt.timedelta(minutes=i), state="succeeded")
        for i in range(30)
    )
    page = ann_client.get(LIST).content.decode()
    assert "more than 10 runs" in page
    last = ann_client.get(LIST, {"p": "15"}).content.decode()
    assert "30 runs" in last
