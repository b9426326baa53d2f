"""Finding runs: by job (the owner's own), by time (recent spans, a date bar
that costs no query), by run id (exactly); the late filter leaves backfills
out; the run page puts the summary and the attempts first."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.db import db_now
from tests.admin_support import add_attempt, make_run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

LIST = reverse("admin:runs_run_changelist")


def listed(client, **params) -> list[str]:
    response = client.get(LIST, params)
    assert response.status_code == 200, response.content.decode()[:2000]
    return re.findall(
        r'<th class="field-scheduled"><a href="/admin/runs/run/([0-9a-f-]+)/change/',
        response.content.decode(),
    )


def test_search_finds_a_run_by_its_whole_id_only(ann, ben, ann_client):
    job = make_job(ann)
    run = make_run(job, ago=60)
    make_run(job, ago=120)
    theirs = make_run(make_job(ben), ago=60)
    assert listed(ann_client, q=str(run.pk)) == [str(run.pk)]
    assert listed(ann_client, q=f"  {str(run.pk).upper()} ") == [str(run.pk)]
    assert listed(ann_client, q=str(theirs.pk)) == []  # another owner's: not found

    prefix = ann_client.get(LIST, {"q": str(run.pk)[:8]})
    assert prefix.status_code == 400
    assert "is not a run id: search takes a whole run id" in prefix.content.decode()


def test_the_job_filter_lists_one_job_and_only_the_owners(ann, ben, ann_client):
    one, other = make_job(ann, name="one"), make_job(ann, name="other")
    mine = make_run(one, ago=60)
    make_run(other, ago=60)
    theirs = make_job(ben, name="bens")
    make_run(theirs, ago=60)
    assert listed(ann_client, job__id__exact=str(one.pk)) == [str(mine.pk)]
    assert listed(ann_client, job__id__exact=str(theirs.pk)) == []
    bad = ann_client.get(LIST, {"job__id__exact": "nope"})
    assert bad.status_code == 400 and "“nope” is not a job id." in bad.content.decode()


def test_the_job_filter_is_an_autocomplete_over_the_owners_jobs(ann, ben, ann_client):
    one = make_job(ann, name="nightly-one")
    make_job(ben, name="bens-nightly")
    page = ann_client.get(LIST, {"job__id__exact": str(one.pk)}).content.decode()
    box = re.search(r'<select name="job__id__exact".*?</select>', page, re.S).group(0)
    assert 'class="admin-autocomplete' in box and "nightly-one" in box
    assert "bens-nightly" not in page
    assert "admin/js/autocomplete.js" in page

    url = reverse("admin:autocomplete")
    found = ann_client.get(
        url, {"term": "nightly", "app_label": "runs", "model_name": "run", "field_name": "job"}
    ).json()
    assert [r["text"] for r in found["results"]] == ["nightly-one"]


def test_within_lists_the_runs_of_the_last_hour_day_or_week(ann, ann_client):
    job = make_job(ann)
    hour = make_run(job, ago=600)
    day = make_run(job, ago=5 * 3600)
    week = make_run(job, ago=3 * 86_400)
    make_run(job, ago=10 * 86_400)
    assert listed(ann_client, within="1h") == [str(hour.pk)]
    assert listed(ann_client, within="24h") == [str(hour.pk), str(day.pk)]
    assert listed(ann_client, within="7d") == [str(hour.pk), str(day.pk), str(week.pk)]
    bad = ann_client.get(LIST, {"within": "2y"})
    assert bad.status_code == 400 and "“within” must be one of 1h, 24h, 7d" in bad.content.decode()


def test_the_date_bar_costs_no_query_and_its_links_filter_by_day(ann, ann_client):
    job = make_job(ann)
    now = db_now()
    today = make_run(job, ago=0, scheduled_at=now.replace(hour=0, minute=0, second=1))
    yesterday = make_run(job, scheduled_at=now.replace(hour=0, minute=0) - dt.timedelta(hours=1))
    with CaptureQueriesContext(connection) as captured:
        page = ann_client.get(LIST).content.decode()
    on_runs = [q["sql"] for q in captured if "runs_run" in q["sql"]]
    assert not [q for q in on_runs if "MIN(" in q or "MAX(" in q or "DISTINCT" in q], on_runs
    bar = re.search(r'<nav class="toplinks">.*?</nav>', page, re.S).group(0)
    assert ">Today<" in bar and ">Yesterday<" in bar and f">{now:%B %Y}<" in bar

    day = {
        "scheduled_at__year": now.year,
        "scheduled_at__month": now.month,
        "scheduled_at__day": now.day,
    }
    assert listed(ann_client, **day) == [str(today.pk)]
    back = now - dt.timedelta(days=1)
    day = {"scheduled_at__year": back.year, "scheduled_at__month": back.month}
    assert str(yesterday.pk) in listed(ann_client, **day, scheduled_at__day=back.day)
    with CaptureQueriesContext(connection) as captured:
        ann_client.get(LIST, day)
    for sql in (q["sql"] for q in captured if '"runs_run"' in q["sql"]):
        assert '"runs_run"."scheduled_at" >=' in sql and '"runs_run"."scheduled_at" <' in sql


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"scheduled_at__month": "5"}, "needs its year"),
        ({"scheduled_at__day": "5"}, "needs its year"),
        ({"scheduled_at__year": "2026", "scheduled_at__month": "13"}, "month must be in 1..12"),
    ],
)
def test_a_date_that_cannot_be_bounded_is_refused(ann_client, params, message):
    response = ann_client.get(LIST, params)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_late_leaves_out_backfills(ann, ann_client):
    job = make_job(ann)
    late = make_run(job, state="succeeded", ago=600, lag_seconds=30.0)
    make_run(job, state="succeeded", ago=7200, lag_seconds=5000.0, kind="backfill")
    make_run(job, state="pending", ago=3 * 3600, kind="backfill")
    assert listed(ann_client, status="late") == [str(late.pk)]


def test_the_why_column_keeps_the_reason_short_and_the_page_shows_it_whole(ann, ann_client):
    error = "upstream said: " + "x" * 300
    run = make_run(make_job(ann), state="failed", last_status_code=502, last_error=error)
    page = ann_client.get(LIST).content.decode()
    why = re.search(r'<td class="field-why">.*?</td>', page, re.S).group(0)
    assert "HTTP 502: upstream said: " in why and "x" * 120 not in why.split("title=")[0][-200:]
    detail = ann_client.get(reverse("admin:runs_run_change", args=[run.pk])).content.decode()
    assert f"HTTP 502: {error}" in detail


def test_the_run_page_shows_the_summary_and_attempts_first_and_folds_the_lease(ann, ann_client):
    now = db_now()
    run = make_run(
        make_job(ann),
        state="running",
        ago=20,
        lease_owner="worker-7",
        lease_until=now + dt.timedelta(seconds=20),
    )
    add_attempt(run, outcome="failed", status_code=503, worker="worker-6")
    page = ann_client.get(reverse("admin:runs_run_change", args=[run.pk])).content.decode()
    summary = page.index("form-row field-job_link")
    attempts = page.index('id="attempts-group"')
    lease = page.index("<details><summary>")
    assert summary < attempts < lease
    assert re.search(r'<details><summary>\s*<h2[^>]*class="fieldset-heading">Lease<', page)
    assert "worker-7" in page


def test_a_finished_run_has_no_lease_section(ann, ann_client):
    run = make_run(make_job(ann), state="succeeded", lease_owner="worker-7")
    page = ann_client.get(reverse("admin:runs_run_change", args=[run.pk])).content.decode()
    assert not re.search(r'class="fieldset-heading">Lease<', page) and "worker-7" not in page


def test_a_retrying_run_shows_its_next_attempt_not_available_at(ann, ann_client):
    now = db_now()
    retrying = make_run(
        make_job(ann), state="retrying", available_at=now + dt.timedelta(seconds=90)
    )
    page = ann_client.get(reverse("admin:runs_run_change", args=[retrying.pk])).content.decode()
    assert "Next attempt at:" in page and "Available at:" not in page
    assert re.search(r"in 1 min 2\d s|in 1 min 30 s", page)
    pending = make_run(make_job(ann), state="pending")
    page = ann_client.get(reverse("admin:runs_run_change", args=[pending.pk])).content.decode()
    assert "Available at:" in page and "Next attempt at:" not in page
