"""The dashboard (fleet, lag chart, outcome chart, oldest pending run) and the
"no dispatcher" banner on every admin page."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.db import db_now
from dispatch.models import LagSample
from ops import health
from runs.models import Run, RunKind
from tests.admin_support import beat, make_run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("admin:dashboard")
BANNER = 'id="dispatcher-banner"'


def admin_pages(job, run) -> list[str]:
    return [
        reverse("admin:index"),
        DASHBOARD,
        reverse("admin:jobs_job_changelist"),
        reverse("admin:jobs_job_add"),
        reverse("admin:jobs_job_change", args=[job.pk]),
        reverse("admin:jobs_job_history", args=[job.pk]),
        reverse("admin:jobs_job_delete", args=[job.pk]),
        reverse("admin:runs_run_changelist"),
        reverse("admin:runs_run_change", args=[run.pk]),
        reverse("admin:jobs_jobevent_changelist"),
        reverse("admin:app_list", args=["jobs"]),
        reverse("admin:password_change"),
    ]


def test_every_admin_page_shows_the_banner_when_no_dispatcher_was_ever_seen(ann, ann_client):
    job = make_job(ann)
    run = make_run(job)
    for url in admin_pages(job, run):
        page = ann_client.get(url, follow=True).content.decode()  # history: a redirect
        assert BANNER in page, url
        assert "No dispatcher is running: fires are late." in page
        assert "No dispatcher has ever been seen" in page


def test_the_banner_says_since_when_a_silent_dispatcher_was_last_seen(ann_client):
    row = beat(ago=120)
    beat("worker", name="worker-alive")  # a live worker does not fire anything
    page = ann_client.get(reverse("admin:index")).content.decode()
    assert BANNER in page
    assert f"The last dispatcher was seen at {row.last_seen:%Y-%m-%d %H:%M:%S} UTC" in page
    assert "2\xa0minutes ago" in page or "2 minutes ago" in page


def test_no_banner_while_a_dispatcher_is_alive(ann, ann_client):
    beat(ago=5)
    job = make_job(ann)
    run = make_run(job)
    for url in admin_pages(job, run):
        assert BANNER not in ann_client.get(url, follow=True).content.decode(), url


BACKLOG_BANNER = 'id="backlog-banner"'


def test_the_backlog_banner_gives_the_health_checks_reason(ann, ann_client):
    beat(ago=1)
    job = make_job(ann, interval_seconds=3600)
    fire = db_now() - dt.timedelta(seconds=90)
    Run.objects.create_for_fires(job, [fire], kind=RunKind.SCHEDULED)
    page = ann_client.get(reverse("admin:index")).content.decode()
    assert BACKLOG_BANNER in page and BANNER not in page
    reason = re.search(r"The health check is degraded: (.*?)\.\s", page).group(1)
    assert reason == health.backlog_reason(health.backlog_seconds()) or reason.startswith(
        "oldest claimable run has waited 9"
    )
    assert "(over 60 s): deliveries are late" in reason


def test_no_backlog_banner_while_runs_are_claimed_in_time(ann, ann_client):
    beat(ago=1)
    job = make_job(ann, interval_seconds=3600)
    Run.objects.create_for_fires(job, [db_now() - dt.timedelta(seconds=5)], kind=RunKind.SCHEDULED)
    assert BACKLOG_BANNER not in ann_client.get(reverse("admin:index")).content.decode()


def test_the_login_page_shows_no_banner(client):
    page = client.get(reverse("admin:login")).content.decode()
    assert BANNER not in page


def test_the_dashboard_shows_the_fleet_with_last_seen(ann_client):
    beat(name="dispatcher-1", ago=2)
    beat("worker", name="worker-gone", ago=300)
    page = ann_client.get(DASHBOARD).content.decode()
    fleet = re.search(r'<div class="module" id="fleet">.*?</table>', page, re.S).group(0)
    assert "dispatcher-1" in fleet and "worker-gone" in fleet
    assert re.search(r"dispatcher-1.*?alive", fleet, re.S)
    assert re.search(r"worker-gone.*?300 s ago.*?silent", fleet, re.S)


def test_the_dashboard_draws_the_lag_of_the_last_hour_as_svg(ann_client):
    now = db_now()
    LagSample.objects.bulk_create(
        [
            LagSample(at=now - dt.timedelta(minutes=50), lag_seconds=0.4),
            LagSample(at=now - dt.timedelta(minutes=49), lag_seconds=3.5),
            LagSample(at=now - dt.timedelta(minutes=48), lag_seconds=0.2),
            LagSample(at=now - dt.timedelta(minutes=2), lag_seconds=0.1),
            LagSample(at=now - dt.timedelta(hours=3), lag_seconds=99.0),  # outside the hour
        ]
    )
    page = ann_client.get(DASHBOARD).content.decode()
    chart = re.search(r'<div class="module" id="lag-chart">.*?</svg>', page, re.S).group(0)
    assert len(re.findall(r'<path class="lag" d="M[\d.]+,[\d.]+ L', chart)) == 1
    assert len(re.findall(r'<circle class="lag-dot"', chart)) == 1  # the lone sample
    assert ">5 s</text>" in chart  # y axis: 3.5 s rounds up to 5, not to 99
    assert 'id="card-lag"' in page


def test_the_dashboard_charts_run_outcomes_and_names_the_oldest_claimable_run(ann, ann_client):
    job = make_job(ann, name="busy")
    for ago, state in ((50, "succeeded"), (40, "failed"), (30, "missed"), (20, "succeeded")):
        make_run(job, state=state, ago=ago * 60)
    oldest = make_run(job, state="pending", ago=600)
    make_run(job, state="pending", ago=5)
    page = ann_client.get(DASHBOARD).content.decode()
    chart = re.search(r'<div class="module" id="outcome-chart">.*?</svg>', page, re.S).group(0)
    states = re.findall(r'<rect class="st-(\w+)"', chart)
    assert sorted(states) == ["failed", "missed", "pending", "pending", "succeeded", "succeeded"]
    card = re.search(r'id="card-oldest-claimable">.*?</div>', page, re.S).group(0)
    assert reverse("admin:runs_run_change", args=[oldest.pk]) in card and "busy" in card
    assert 'class="punctual-count">10 min<' in card

    day = ann_client.get(DASHBOARD, {"range": "day"}).content.decode()
    assert "Run outcomes, last day" in day


def test_owners_see_only_their_own_runs_on_the_dashboard(ann, ben, ann_client):
    make_run(make_job(ben, name="ben-job"), state="pending", ago=600)
    page = ann_client.get(DASHBOARD).content.decode()
    assert "ben-job" not in page
    assert '<rect class="st-' not in page


def test_the_dashboard_needs_no_external_asset(ann_client):
    page = ann_client.get(DASHBOARD).content.decode()
    links = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert links and all(not re.match(r"(https?:)?//", link) for link in links), links


def test_dashboard_run_queries_are_bounded_by_time_or_active_state(ann, root_client):
    make_run(make_job(ann), state="succeeded")
    with CaptureQueriesContext(connection) as captured:
        root_client.get(DASHBOARD)
    on_runs = [q["sql"] for q in captured if "runs_run" in q["sql"]]
    # The outcome chart, the active counts, the failing, missed and unclaimed
    # pull cards (a count and a list each), the failed runs, the oldest
    # claimable run (the card's, webhook and pull, and the backlog banner's).
    assert len(on_runs) == 12, "\n".join(on_runs)
    for sql in on_runs:
        bounded_by_time = re.search(r'"scheduled_at" >= ', sql)
        active_only = re.search(r"state\"? IN \('pending', '(running|retrying)'", sql)
        assert bounded_by_time or active_only, sql
