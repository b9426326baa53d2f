"""The "Needs attention" cards of the admin's index and dashboard: failing
jobs, jobs paused by the system, missed fires, the latest failed runs and the
oldest run waiting for a worker; each card links to the list filtered to
exactly what it counts, and an owner sees only their own."""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from core.db import db_now
from runs import job_verbs
from runs.models import Run
from tests.admin_support import make_run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

INDEX = reverse("admin:index")
DASHBOARD = reverse("admin:dashboard")
JOBS = reverse("admin:jobs_job_changelist")
RUNS = reverse("admin:runs_run_changelist")
DAY = 86_400


def card(page: str, key: str) -> str:
    found = re.search(
        rf'<div class="punctual-attention-card[^"]*" id="card-{key}">.*?\n    </div>', page, re.S
    )
    assert found, key
    return found.group(0)


def card_count(page: str, key: str) -> int | None:
    found = re.search(r'class="punctual-count">(\d+)<', card(page, key))
    return int(found.group(1)) if found else None


def card_link(page: str, key: str) -> str:
    return html.unescape(
        re.search(r'class="punctual-card-link"><a href="([^"]+)"', card(page, key)).group(1)
    )


def job_names(client, url: str) -> set[str]:
    page = client.get(url).content.decode()
    return set(re.findall(r'<th class="field-name"><a href="[^"]+">([^<]+)</a>', page))


@pytest.fixture
def fleet(ann, ben):
    """Ann's jobs, one per question (and one for none), and one of Ben's."""
    now = db_now()
    streak = make_job(ann, name="streak")
    streak.consecutive_failures = 3
    streak.save(update_fields=["consecutive_failures"])

    # Resumed after failing: the streak is cleared, its last delivery failed.
    resumed = make_job(ann, name="resumed-after-failure")
    make_run(resumed, state="succeeded", ago=3 * 3600)
    make_run(resumed, state="failed", ago=2 * 3600, last_status_code=500)
    make_run(resumed, state="missed", ago=3600, reason="past grace")  # not a delivery

    # Failed a week ago, fine since: nothing to look at.
    recovered = make_job(ann, name="recovered")
    make_run(recovered, state="failed", ago=7 * DAY)
    make_run(recovered, state="succeeded", ago=6 * DAY)

    stale_failure = make_job(ann, name="failed-long-ago")
    make_run(stale_failure, state="failed", ago=3 * DAY)

    gone = make_job(ann, name="gone-410")
    job_verbs.pause_by_system(
        gone.pk, note="Paused automatically: the target answered 410 Gone.", now=now
    )
    by_owner = make_job(ann, name="paused-by-ann")
    job_verbs.pause(by_owner, actor=ann, channel="admin", note="holiday")
    # Paused by the system, then paused again by its owner: still the
    # system's, with its reason, until a resume.
    repaused = make_job(ann, name="repaused-by-ann")
    job_verbs.pause_by_system(repaused.pk, note="Paused automatically after 5 failures.", now=now)
    repaused.refresh_from_db()
    job_verbs.pause(repaused, actor=ann, channel="api", note="looking into it")

    missed = make_job(ann, name="missed-today")
    make_run(missed, state="missed", ago=2 * 3600, reason="past grace")
    old_miss = make_job(ann, name="missed-last-week")
    make_run(old_miss, state="missed", ago=2 * DAY, reason="past grace")
    skipped = make_job(ann, name="skipped-overlap")
    make_run(skipped, state="skipped", ago=600, reason="overlap")

    fine = make_job(ann, name="fine")
    make_run(fine, state="succeeded", ago=60)

    theirs = make_job(ben, name="ben-failing")
    theirs.consecutive_failures = 1
    theirs.save(update_fields=["consecutive_failures"])
    make_run(theirs, state="failed", ago=600)
    make_run(theirs, state="missed", ago=600 + 300, reason="past grace")
    job_verbs.pause_by_system(make_job(ben, name="ben-gone").pk, note="410", now=now)
    return {"resumed": resumed, "missed": missed}


@pytest.mark.parametrize("url", [INDEX, DASHBOARD])
def test_each_card_counts_and_names_what_needs_attention(ann_client, fleet, url):
    page = ann_client.get(url).content.decode()
    assert card_count(page, "failing") == 2
    assert "streak" in card(page, "failing") and "3 failed in a row" in card(page, "failing")
    assert "resumed-after-failure" in card(page, "failing")
    assert "its last run failed" in card(page, "failing")
    assert card_count(page, "system-paused") == 2
    assert "gone-410" in card(page, "system-paused") and "410 Gone" in card(page, "system-paused")
    assert "repaused-by-ann" in card(page, "system-paused")
    assert "after 5 failures" in card(page, "system-paused")
    assert "looking into it" not in card(page, "system-paused")
    assert card_count(page, "missed") == 2 and "missed-today" in card(page, "missed")
    assert "missed-last-week" not in card(page, "missed")
    failed = card(page, "failed-runs")
    assert "resumed-after-failure" in failed and "HTTP 500" in failed
    assert "failed-long-ago" not in failed and "recovered" not in failed
    assert "ben-" not in page
    job_page = reverse("admin:jobs_job_change", args=[fleet["missed"].pk])
    assert f'href="{job_page}"' in card(page, "missed")


def test_each_card_links_to_the_list_of_exactly_what_it_counts(ann_client, fleet):
    page = ann_client.get(DASHBOARD).content.decode()
    assert job_names(ann_client, card_link(page, "failing")) == {
        "streak",
        "resumed-after-failure",
    }
    assert job_names(ann_client, card_link(page, "system-paused")) == {
        "gone-410",
        "repaused-by-ann",
    }
    assert job_names(ann_client, card_link(page, "missed")) == {
        "missed-today",
        "resumed-after-failure",
    }
    failed_runs = ann_client.get(card_link(page, "failed-runs")).content.decode()
    assert failed_runs.count('class="field-scheduled"') == 1
    assert "resumed-after-failure" in failed_runs


def test_not_failing_is_every_other_job(ann_client, fleet):
    healthy = job_names(ann_client, JOBS + "?health=healthy")
    assert "streak" not in healthy and "resumed-after-failure" not in healthy
    assert {"fine", "recovered", "failed-long-ago", "missed-today"} <= healthy


def test_a_superuser_sees_every_owners_jobs_on_the_cards(root_client, fleet):
    page = root_client.get(DASHBOARD).content.decode()
    assert card_count(page, "failing") == 3 and "ben-failing" in card(page, "failing")
    assert card_count(page, "system-paused") == 3
    assert card_count(page, "missed") == 3


def test_the_oldest_claimable_run_is_the_owners_own(ann, ben, ann_client, root_client):
    mine = make_job(ann, name="ann-waits")
    theirs = make_job(ben, name="ben-waits-longer")
    run = make_run(mine, state="pending", ago=120)
    make_run(theirs, state="pending", ago=900)
    page = ann_client.get(DASHBOARD).content.decode()
    oldest = card(page, "oldest-claimable")
    assert 'class="punctual-count">2 min<' in oldest
    assert reverse("admin:runs_run_change", args=[run.pk]) in oldest
    assert "ben-waits-longer" not in page
    assert "ben-waits-longer" in card(
        root_client.get(DASHBOARD).content.decode(), "oldest-claimable"
    )


def test_a_quiet_fleet_says_so_on_every_card(ann, ann_client):
    make_run(make_job(ann, name="quiet"), state="succeeded", ago=60)
    page = ann_client.get(INDEX).content.decode()
    assert "No job is failing." in page
    assert "No job was paused by the system." in page
    assert "No fire was missed in the last 24 hours." in page
    assert "No run failed in the last 24 hours." in page
    assert "No run is waiting for a worker." in page
    assert ' punctual-attention-on"' not in page


def test_failed_runs_are_listed_newest_first_and_at_most_six(ann, ann_client):
    job = make_job(ann, name="flaky")
    runs = [make_run(job, state="failed", ago=600 * (i + 1)) for i in range(8)]
    page = ann_client.get(DASHBOARD).content.decode()
    links = re.findall(r"/admin/runs/run/([0-9a-f-]+)/change/", card(page, "failed-runs"))
    assert links == [str(run.pk) for run in runs[:6]]
    assert Run.objects.filter(state="failed").count() == 8


def test_the_oldest_claimable_card_links_to_the_runs_it_counts(ann, ann_client):
    """The list behind "Oldest waiting run" is what the health check's backlog
    counts: due waiting runs of live jobs that a worker could take now."""
    due = make_run(make_job(ann, name="due"), state="pending", ago=300)
    retry = make_run(make_job(ann, name="retry-due"), state="retrying", ago=200)
    later = make_run(make_job(ann, name="later"), state="pending", ago=-600)
    paused_job = make_job(ann, name="paused")
    paused = make_run(paused_job, state="pending", ago=400)
    job_verbs.pause(paused_job, actor=ann, channel="admin")
    queued_job = make_job(ann, name="queued", overlap_policy="queue")
    make_run(queued_job, state="running", ago=100, exclusive=True, lease_owner="w1")
    behind = make_run(queued_job, state="pending", ago=50, exclusive=True)
    page = ann_client.get(DASHBOARD).content.decode()
    listed = ann_client.get(card_link(page, "oldest-claimable")).content.decode()
    shown = {
        run.pk
        for run in (due, retry, later, paused, behind)
        if reverse("admin:runs_run_change", args=[run.pk]) in listed
    }
    assert shown == {due.pk, retry.pk}


def test_a_pull_run_nobody_claims_needs_attention_and_is_the_oldest_waiting_run(
    ann, ann_client, settings
):
    """Issue 35: a pull run had waited over 3 minutes, and "Oldest waiting
    run" said nothing was waiting. A pull job whose run waits past
    PUNCTUAL_PULL_UNCLAIMED_SECONDS with no claim is on its own card, and
    its run is the oldest waiting one, on the card and in the list it links to."""
    settings.PUNCTUAL_PULL_UNCLAIMED_SECONDS = 60
    gone = make_job(ann, name="worker-gone", target_kind="pull", url="")
    stale = make_run(gone, state="pending", ago=200)
    just_due = make_job(ann, name="just-due", target_kind="pull", url="")
    make_run(just_due, state="pending", ago=10)  # within the limit: not yet
    claimed = make_job(ann, name="claimed", target_kind="pull", url="")
    make_run(claimed, state="running", ago=300, lease_owner=f"pull:{ann.pk}:w1")
    make_run(make_job(ann, name="webhook-late"), state="pending", ago=100)

    page = ann_client.get(DASHBOARD).content.decode()
    assert card_count(page, "unclaimed-pull") == 1
    assert "worker-gone" in card(page, "unclaimed-pull")
    assert job_names(ann_client, card_link(page, "unclaimed-pull")) == {"worker-gone"}

    oldest = card(page, "oldest-claimable")
    assert 'class="punctual-count">3 min 20 s<' in oldest
    assert reverse("admin:runs_run_change", args=[stale.pk]) in oldest
    listed = ann_client.get(card_link(page, "oldest-claimable")).content.decode()
    assert reverse("admin:runs_run_change", args=[stale.pk]) in listed
