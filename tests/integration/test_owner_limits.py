"""Per-owner limits (docs/guides/owners.md "Owner limits"), as a table: each limit is hit
through the API and through the admin, refused with an error that names it,
with the same text both ways, and nothing is written; an owner's override
lifts it. Then the details: a bulk create is refused whole, a backfill larger
than the hourly limit is a 403, a job's old interval survives edits, a
superuser's jobs have no minimum interval, only superusers reach the
overrides, and two connections racing for the last room never both get it.

Backfill has no admin path (the admin has no backfill action), so its row
has none."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import IntegrityError, connection, transaction
from django.db.models import Count
from django.test import Client
from django.urls import reverse

from core.db import db_now
from core.errors import LimitExceeded
from dispatch.worker import Worker
from jobs import quotas
from jobs.models import (
    BackfillUse,
    IdempotencyKey,
    Job,
    JobEvent,
    OwnerLimits,
    RetryUse,
    ScheduleSpan,
)
from runs import job_verbs
from runs.models import Run
from tests.admin_support import PASSWORD, make_owner, make_run
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL, token_client
from tests.integration.races import start, wait_until_blocked_or_done

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
ADD = reverse("admin:jobs_job_add")
LIST = reverse("admin:jobs_job_changelist")
LIMITS = reverse("admin:jobs_ownerlimits_changelist")
HOURLY = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T03:00:00Z"}  # 3 hourly fires
LATER = {"start": "2026-01-01T03:00:00Z", "end": "2026-01-01T06:00:00Z"}  # 3 more


def footprint() -> dict[str, int]:
    """Every table a refused request might have written to."""
    tables = (Job, Run, JobEvent, ScheduleSpan, BackfillUse, RetryUse, IdempotencyKey)
    return {model.__name__: model.objects.count() for model in tables}


def job_body(name: str, **fields: Any) -> dict:
    return {"name": name, "interval_seconds": 60, "url": PUBLIC_URL, **fields}


def admin_form(name: str, interval: int = 60) -> dict:
    return {
        "name": name,
        "interval_seconds": str(interval),
        "timezone": "UTC",
        "target_kind": "webhook",
        "url": PUBLIC_URL,
        "payload": "{}",
        "timeout_seconds": "30",
        "max_attempts": "3",
        "retry_backoff_seconds": "10",
        "misfire_policy": "skip",
        "max_catchup": "3",
        "misfire_grace_seconds": "60",
        "overlap_policy": "skip",
        "jitter_seconds": "0",
    }


def change_form(job: Job, **fields: str) -> dict:
    return {
        **admin_form(job.name, job.interval_seconds or 60),
        "expected_version": job.version,
        **fields,
    }


def form_errors(response) -> list[str]:
    """The admin form's errors, the field's and the form's, in one list."""
    assert response.status_code == 200, response.status_code
    form = response.context["adminform"].form
    return [str(message) for messages in form.errors.values() for message in messages]


def shown(response) -> list[str]:
    """The admin's messages on the page a redirect led to."""
    return [str(message) for message in response.context["messages"]]


def api_refusal(answer, limit: str) -> str:
    """The refusal's text, once the answer is checked to name ``limit``."""
    body = answer.json()
    if limit == quotas.MIN_INTERVAL:
        # A field bound like any other: 400 under the field, the message names the limit.
        assert answer.status_code == 400, body
        assert limit in body["interval_seconds"][0], body
        return body["interval_seconds"][0]
    assert body["limit"] == limit, body
    assert answer.status_code in (403, 429), body
    if answer.status_code == 429:
        assert 1 <= int(answer["Retry-After"]) <= 3600
    return body["detail"]


def same_text(text: str) -> str:
    """A message with its wait in seconds left out: the admin asks a moment later."""
    return re.sub(r"in [\d,]+ s\b", "in … s", text)


# -- the table ----------------------------------------------------------------


@dataclass
class Case:
    limit: str
    setting: tuple[str, int]
    # Makes what the refused request needs (the owner's job, earlier uses).
    prepare: Callable[[Any, Any], Job | None]
    # The request that the limit refuses, through the API.
    api: Callable[[Any, Job | None], Any]
    # The same through the admin: the refusal's text, or the page's when it passed.
    admin: Callable[[Client, Job | None], tuple[bool, list[str]]] | None
    status: int
    override: dict = field(default_factory=dict)
    # The test's id, when two cases hit the same limit.
    name: str = ""


def two_jobs(owner, api) -> None:
    make_job(owner)
    make_job(owner)


def create_one(api, _job):
    return api.post(JOBS, job_body("one-more"), format="json")


def add_in_admin(interval: int) -> Callable[[Client, Any], tuple[bool, list[str]]]:
    def add(client: Client, _job) -> tuple[bool, list[str]]:
        response = client.post(ADD, admin_form("added-in-the-admin", interval))
        if response.status_code == 302:
            return True, []
        return False, form_errors(response)

    return add


def hourly_job(owner, api) -> Job:
    return make_job(owner, cron="0 * * * *", interval_seconds=None)


def job_with_triggers(owner, api) -> Job:
    job = make_job(owner)
    for _ in range(2):
        assert api.post(f"{JOBS}{job.pk}/trigger/").status_code == 201
    return job


def trigger(api, job):
    return api.post(f"{JOBS}{job.pk}/trigger/")


def trigger_in_admin(client: Client, job) -> tuple[bool, list[str]]:
    response = client.post(
        LIST, {"action": "trigger_jobs", "_selected_action": [str(job.pk)]}, follow=True
    )
    texts = shown(response)
    refused = [t.split(": ", 1)[1] for t in texts if "was not triggered" in t]
    return not refused, refused


def failed_run(job: Job) -> Run:
    """The job's one run, failed: when a retry made it pending again, the
    worker's own code delivers it, and it fails: nothing listens at the
    factory's target (port 9 of this host), and the job has one attempt."""
    run = Run.objects.get(job=job)
    if run.state != "failed":
        assert Worker(concurrency=1, lease_seconds=5, allow_private=True).run_once() == 1
        run.refresh_from_db()
    assert run.state == "failed", run.state
    return run


def job_with_a_retried_run(owner, api) -> Job:
    """A job whose manual run failed, was retried once and failed again:
    two of its triggers per minute used, the trigger's and the retry's."""
    job = make_job(owner, max_attempts=1)
    assert trigger(api, job).status_code == 201
    assert retry(api, job).status_code == 200
    return job


def retry(api, job):
    return api.post(f"/api/v1/runs/{failed_run(job).pk}/retry/")


def retry_in_admin(client: Client, job) -> tuple[bool, list[str]]:
    run = failed_run(job)
    response = client.post(reverse("admin:runs_run_retry", args=[run.pk]), follow=True)
    texts = shown(response)
    refused = [t.split(": ", 1)[1] for t in texts if "was not retried" in t]
    return not refused, refused


def backfilled_job(owner, api) -> Job:
    job = hourly_job(owner, api)
    assert api.post(f"{JOBS}{job.pk}/backfill/", HOURLY, format="json").status_code == 200
    return job


CASES = [
    Case(
        quotas.JOBS,
        ("PUNCTUAL_MAX_JOBS_PER_OWNER", 2),
        two_jobs,
        create_one,
        add_in_admin(60),
        403,
        {"jobs_per_owner": 4},
    ),
    Case(
        quotas.MIN_INTERVAL,
        ("PUNCTUAL_MIN_INTERVAL_SECONDS", 10),
        lambda owner, api: None,
        lambda api, _job: api.post(JOBS, job_body("fast", interval_seconds=9), format="json"),
        add_in_admin(9),
        400,
        {"min_interval_seconds": 9},
    ),
    Case(
        quotas.BACKFILL,
        ("PUNCTUAL_BACKFILL_RUNS_PER_HOUR", 5),
        backfilled_job,
        lambda api, job: api.post(f"{JOBS}{job.pk}/backfill/", LATER, format="json"),
        None,
        429,
        {"backfill_runs_per_hour": 6},
    ),
    Case(
        quotas.TRIGGERS,
        ("PUNCTUAL_TRIGGERS_PER_MINUTE", 2),
        job_with_triggers,
        trigger,
        trigger_in_admin,
        429,
        {"triggers_per_minute": 4},
    ),
    Case(
        quotas.TRIGGERS,
        ("PUNCTUAL_TRIGGERS_PER_MINUTE", 2),
        job_with_a_retried_run,
        retry,
        retry_in_admin,
        429,
        {"triggers_per_minute": 4},
        name="triggers_per_minute (a retry)",
    ),
]
IDS = [case.name or case.limit for case in CASES]


@pytest.fixture
def ann():
    return make_owner("ann")


@pytest.fixture
def ann_api(ann):
    return token_client(ann)


@pytest.fixture
def ann_admin(ann) -> Client:
    client = Client()
    client.force_login(ann)
    return client


def test_the_table_covers_every_owner_limit():
    assert {case.limit for case in CASES} == {
        quotas.JOBS,
        quotas.MIN_INTERVAL,
        quotas.BACKFILL,
        quotas.TRIGGERS,
    }


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_each_limit_refuses_in_the_api_and_the_admin_alike_writing_nothing(
    case, settings, ann, ann_api, ann_admin
):
    setattr(settings, *case.setting)
    job = case.prepare(ann, ann_api)
    before = footprint()

    answer = case.api(ann_api, job)
    assert answer.status_code == case.status, answer.content
    text = api_refusal(answer, case.limit)
    assert f"{case.setting[1]:,}" in text  # the number itself
    assert footprint() == before

    if case.admin is not None:
        passed, refusals = case.admin(ann_admin, job)
        assert not passed
        assert [same_text(t) for t in refusals] == [same_text(text)]
        assert footprint() == before


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_an_owner_s_override_lifts_the_limit(case, settings, ann, ann_api, ann_admin):
    setattr(settings, *case.setting)
    job = case.prepare(ann, ann_api)
    OwnerLimits.objects.create(owner=ann, **case.override)
    answer = case.api(ann_api, job)
    assert answer.status_code in (200, 201), answer.content
    if case.admin is not None:
        passed, refusals = case.admin(ann_admin, job)
        assert passed, refusals


# -- details --------------------------------------------------------------------


def test_a_bulk_create_over_the_jobs_limit_is_refused_whole(settings, ann, ann_api):
    settings.PUNCTUAL_MAX_JOBS_PER_OWNER = 3
    make_job(ann)
    before = footprint()
    answer = ann_api.post(JOBS, [job_body(f"bulk-{i}") for i in range(3)], format="json")
    assert answer.status_code == 403
    assert "adding 3 jobs" in api_refusal(answer, quotas.JOBS)
    assert footprint() == before
    answer = ann_api.post(JOBS, [job_body(f"bulk-{i}") for i in range(2)], format="json")
    assert answer.status_code == 201
    assert Job.objects.filter(owner=ann).count() == 3


def test_deleted_jobs_do_not_count_and_paused_ones_do(settings, ann, ann_api):
    settings.PUNCTUAL_MAX_JOBS_PER_OWNER = 2
    paused, deleted = make_job(ann), make_job(ann)
    job_verbs.pause(paused)
    job_verbs.soft_delete(deleted)
    assert create_one(ann_api, None).status_code == 201
    answer = ann_api.post(JOBS, job_body("third"), format="json")
    assert answer.status_code == 403, answer.content


def live_counts() -> dict[int, int]:
    """The owners' live jobs as jobs_live_jobs holds them, and as the jobs
    themselves say: the limit reads the first, so it must equal the second."""
    with connection.cursor() as cur:
        cur.execute("SELECT owner_id, live FROM jobs_live_jobs WHERE live > 0")
        held = dict(cur.fetchall())
    counted = {
        row["owner_id"]: row["n"]
        for row in Job.objects.live().values("owner_id").annotate(n=Count("id"))
    }
    assert held == counted
    return held


def test_the_live_jobs_count_follows_every_way_a_job_comes_and_goes(ann, ann_api):
    bob = make_owner("bob")
    make_job(ann)
    assert live_counts() == {ann.pk: 1}
    bulk = ann_api.post(JOBS, [job_body(f"bulk-{i}") for i in range(5)], format="json")
    assert bulk.status_code == 201, bulk.content
    assert create_one(ann_api, None).status_code == 201
    assert live_counts() == {ann.pk: 7}
    doomed = Job.objects.get(name="bulk-0")
    job_verbs.soft_delete(doomed)
    job_verbs.soft_delete(doomed)  # a second delete changes nothing
    job_verbs.pause(Job.objects.get(name="bulk-1"))  # paused jobs still count
    assert live_counts() == {ann.pk: 6}
    Job.objects.filter(name="bulk-2").update(owner=bob)  # a job given to another owner
    Job.objects.filter(pk=doomed.pk).update(owner=bob)  # a deleted one counts for nobody
    assert live_counts() == {ann.pk: 5, bob.pk: 1}
    Job.objects.filter(name="bulk-3").update(deleted_at=None)  # already live: no change
    assert live_counts() == {ann.pk: 5, bob.pk: 1}
    Job.objects.filter(owner=ann, name__startswith="bulk-").delete()  # rows gone for good
    assert live_counts() == {ann.pk: 2, bob.pk: 1}


@pytest.mark.django_db(transaction=True)
def test_emptying_the_jobs_table_empties_the_live_jobs_count(owner):
    """The tests' flush and the bench's reset TRUNCATE jobs_job."""
    make_job(owner)
    assert live_counts() == {owner.pk: 1}
    with connection.cursor() as cur:
        cur.execute("TRUNCATE jobs_job CASCADE")
    assert live_counts() == {}


def test_a_backfill_larger_than_the_hourly_limit_is_403_waiting_never_helps(settings, ann, ann_api):
    settings.PUNCTUAL_BACKFILL_RUNS_PER_HOUR = 2
    job = hourly_job(ann, ann_api)
    before = footprint()
    answer = ann_api.post(f"{JOBS}{job.pk}/backfill/", HOURLY, format="json")
    assert answer.status_code == 403 and "Retry-After" not in answer
    assert "Narrow the window" in api_refusal(answer, quotas.BACKFILL)
    assert footprint() == before
    # A dry run creates nothing, so it counts nothing and is never refused.
    dry = ann_api.post(f"{JOBS}{job.pk}/backfill/", {**HOURLY, "dry_run": True}, format="json")
    assert dry.status_code == 200 and len(dry.json()["slots"]) == 3


def test_backfill_runs_count_per_owner_across_jobs_and_expire_after_the_hour(
    settings, ann, ann_api
):
    settings.PUNCTUAL_BACKFILL_RUNS_PER_HOUR = 4
    first, second = hourly_job(ann, ann_api), hourly_job(ann, ann_api)
    assert ann_api.post(f"{JOBS}{first.pk}/backfill/", HOURLY, format="json").status_code == 200
    answer = ann_api.post(f"{JOBS}{second.pk}/backfill/", HOURLY, format="json")
    assert answer.status_code == 429
    assert 3590 <= int(answer["Retry-After"]) <= 3600
    # An hour later (by the database's clock, as the uses were stamped).
    BackfillUse.objects.update(used_at=db_now() - dt.timedelta(hours=1, seconds=1))
    assert ann_api.post(f"{JOBS}{second.pk}/backfill/", HOURLY, format="json").status_code == 200
    assert BackfillUse.objects.count() == 1  # the expired use was swept


def test_the_admin_test_delivery_button_is_refused_with_the_same_message(
    settings, ann, ann_api, ann_admin
):
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 1
    job = make_job(ann)
    assert trigger(ann_api, job).status_code == 201
    before = footprint()
    answer = trigger(ann_api, job)
    response = ann_admin.post(reverse("admin:jobs_job_test_delivery", args=[job.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("admin:jobs_job_change", args=[job.pk])
    [message] = shown(response)
    assert same_text(message) == same_text(
        f"“{job.name}” was not triggered: {api_refusal(answer, quotas.TRIGGERS)}"
    )
    assert footprint() == before


def test_a_repeated_idempotent_trigger_is_not_counted_again(settings, ann, ann_api):
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 1
    job = make_job(ann)
    first = ann_api.post(f"{JOBS}{job.pk}/trigger/", HTTP_IDEMPOTENCY_KEY="k")
    again = ann_api.post(f"{JOBS}{job.pk}/trigger/", HTTP_IDEMPOTENCY_KEY="k")
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert trigger(ann_api, job).status_code == 429


def test_triggers_are_counted_per_job(settings, ann, ann_api):
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 1
    one, two = make_job(ann), make_job(ann)
    assert trigger(ann_api, one).status_code == 201
    assert trigger(ann_api, two).status_code == 201
    assert trigger(ann_api, one).status_code == 429


def test_a_failed_run_retried_past_the_limit_is_refused_and_stays_failed(settings, ann, ann_api):
    """One failed run, retried again and again within a minute: the limit's
    retries pass, each one delivered and failed again by the worker; the
    next is a 429 that names the limit and writes nothing."""
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 5
    job = make_job(ann, max_attempts=1)
    run = make_run(job, state="failed", attempt=1)
    for _ in range(5):
        assert retry(ann_api, job).status_code == 200
    failed_run(job)
    before = footprint()
    events = list(JobEvent.objects.values_list("pk", flat=True))

    answer = retry(ann_api, job)
    assert answer.status_code == 429, answer.content
    text = api_refusal(answer, quotas.TRIGGERS)
    assert "retried 5 times in the last minute" in text and "at most 5 times" in text
    assert 1 <= int(answer["Retry-After"]) <= 60
    run.refresh_from_db()
    assert (run.state, run.attempt, run.max_attempts) == ("failed", 6, 6)
    assert footprint() == before
    assert list(JobEvent.objects.values_list("pk", flat=True)) == events


def test_retries_and_manual_runs_share_the_job_s_limit(settings, ann, ann_api):
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 2
    job = make_job(ann, max_attempts=1)
    run = make_run(job, state="failed", attempt=1)
    assert retry(ann_api, job).status_code == 200
    failed_run(job)
    assert trigger(ann_api, job).status_code == 201
    assert ann_api.post(f"/api/v1/runs/{run.pk}/retry/").status_code == 429
    assert trigger(ann_api, job).status_code == 429
    other = make_job(ann, max_attempts=1)  # counted per job
    make_run(other, state="failed", attempt=1)
    assert retry(ann_api, other).status_code == 200


def test_retries_older_than_the_minute_are_swept_and_free_the_limit(settings, ann, ann_api):
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 1
    job = make_job(ann, max_attempts=1)
    make_run(job, state="failed", attempt=1)
    assert retry(ann_api, job).status_code == 200
    assert retry(ann_api, job).status_code == 429
    # A minute later (by the database's clock, as the uses were stamped).
    RetryUse.objects.update(used_at=db_now() - dt.timedelta(minutes=1, seconds=1))
    assert retry(ann_api, job).status_code == 200
    assert RetryUse.objects.count() == 1  # the expired use was swept


def test_the_admin_retry_action_reports_the_runs_the_limit_refused(settings, ann, ann_admin):
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 2
    job = make_job(ann, name="nightly", max_attempts=1)
    runs = [make_run(job, state="failed", attempt=1, ago=60 * (i + 1)) for i in range(3)]
    response = ann_admin.post(
        reverse("admin:runs_run_changelist"),
        {"action": "retry_runs", "_selected_action": [str(r.pk) for r in runs]},
        follow=True,
    )
    texts = shown(response)
    assert texts[0] == "Retried 2 runs."
    assert texts[1].startswith("1 run of “nightly” not retried: This job was triggered or retried")
    assert sorted(Run.objects.filter(job=job).values_list("state", flat=True)) == [
        "failed",
        "pending",
        "pending",
    ]


def test_an_edit_below_the_minimum_interval_is_refused_and_an_old_interval_kept(
    settings, ann, ann_api, ann_admin
):
    settings.PUNCTUAL_MIN_INTERVAL_SECONDS = 30
    job = make_job(ann, interval_seconds=5)  # made before the limit
    before = footprint()
    answer = ann_api.patch(f"{JOBS}{job.pk}/", {"interval_seconds": 20}, format="json")
    text = api_refusal(answer, quotas.MIN_INTERVAL)
    assert "at least 30 seconds" in text
    change = reverse("admin:jobs_job_change", args=[job.pk])
    assert form_errors(ann_admin.post(change, change_form(job, interval_seconds="20"))) == [text]
    assert footprint() == before
    # Edits that leave the interval alone still work, PUT included.
    assert ann_api.patch(f"{JOBS}{job.pk}/", {"description": "x"}, format="json").status_code == 200
    assert (
        ann_api.put(
            f"{JOBS}{job.pk}/", job_body(job.name, interval_seconds=5), format="json"
        ).status_code
        == 200
    )
    job.refresh_from_db()
    response = ann_admin.post(change, change_form(job, description="from the admin"))
    assert response.status_code == 302
    job.refresh_from_db()
    assert (job.interval_seconds, job.description) == (5, "from the admin")


def test_a_superuser_s_jobs_have_no_minimum_interval(settings):
    settings.PUNCTUAL_MIN_INTERVAL_SECONDS = 60
    root = make_owner("root", superuser=True)
    answer = token_client(root).post(JOBS, job_body("fast", interval_seconds=1), format="json")
    assert answer.status_code == 201, answer.content
    # Another owner's job, made by the superuser in the admin, has its owner's minimum.
    ann = make_owner("ann")
    client = Client()
    client.force_login(root)
    errors = form_errors(client.post(ADD, {**admin_form("ann-fast", 1), "owner": ann.pk}))
    assert errors and quotas.MIN_INTERVAL in errors[0]


def test_the_payload_limit_comes_from_the_environment(settings, ann, ann_api, ann_admin):
    settings.PUNCTUAL_MAX_PAYLOAD_BYTES = 1024
    payload = {"p": "x" * 1100}
    before = footprint()
    answer = ann_api.post(JOBS, job_body("big", payload=payload), format="json")
    assert answer.status_code == 400 and "1,024 bytes" in answer.json()["payload"][0]
    response = ann_admin.post(ADD, {**admin_form("big"), "payload": json.dumps(payload)})
    assert any("1,024 bytes" in e for e in form_errors(response))
    assert footprint() == before


@pytest.mark.parametrize(
    "name,value",
    [
        ("PUNCTUAL_MIN_INTERVAL_SECONDS", "61"),
        ("PUNCTUAL_MAX_JOBS_PER_OWNER", "-1"),
        ("PUNCTUAL_MAX_PAYLOAD_BYTES", "2000000"),
    ],
)
def test_a_limit_setting_out_of_range_stops_the_process(name, value):
    env = {"SECRET_KEY": "x", "PATH": "/usr/bin:/bin", name: value}
    done = subprocess.run(
        [sys.executable, "-c", "import scheduler_site.settings"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert f"{name} must be between" in done.stderr


# -- the overrides are the superusers' --------------------------------------------


def test_only_superusers_see_and_change_owner_limits(ann, ann_admin):
    root = make_owner("root", superuser=True)
    # Staff with every permission there is, but not a superuser.
    staff = get_user_model().objects.create_user("staff", password=PASSWORD, is_staff=True)
    staff.user_permissions.add(*Permission.objects.all())
    OwnerLimits.objects.create(owner=ann, triggers_per_minute=100)
    change = reverse("admin:jobs_ownerlimits_change", args=[ann.pk])
    add = reverse("admin:jobs_ownerlimits_add")
    for user in (ann, staff):
        client = Client()
        client.force_login(user)
        for url in (LIMITS, change, add):
            assert client.get(url).status_code == 403, (user.username, url)
        assert (
            client.post(change, {"owner": ann.pk, "triggers_per_minute": "1000"}).status_code == 403
        )
        assert "ownerlimits" not in client.get(reverse("admin:index")).content.decode()
    assert OwnerLimits.objects.get(owner=ann).triggers_per_minute == 100

    client = Client()
    client.force_login(root)
    assert client.get(LIMITS).status_code == 200
    response = client.post(change, {"owner": ann.pk, "triggers_per_minute": "1000", "note": "CI"})
    assert response.status_code == 302
    assert OwnerLimits.objects.get(owner=ann).triggers_per_minute == 1000
    # Out of range: a form error, not a 500.
    response = client.post(change, {"owner": ann.pk, "min_interval_seconds": "61"})
    assert (
        response.status_code == 200
        and "min_interval_seconds" in response.context["adminform"].form.errors
    )


# -- races: two connections, one room ---------------------------------------------


def race(first: Callable[[], Any], second: Callable[[], Any]):
    """``first`` in an open transaction on this connection; ``second`` on
    another, started meanwhile and waited for until it blocks on a lock (or
    finished); then ``first`` commits. Returns the other connection."""
    with transaction.atomic():
        first()
        other = start(second)
        wait_until_blocked_or_done(other, "the second request")
    return other


@pytest.mark.django_db(transaction=True)
def test_two_backfills_racing_for_the_last_room_do_not_both_pass(settings, owner):
    settings.PUNCTUAL_BACKFILL_RUNS_PER_HOUR = 5
    jobs = [make_job(owner, cron="0 * * * *", interval_seconds=None) for _ in range(2)]
    window = [dt.datetime.fromisoformat(HOURLY[k]) for k in ("start", "end")]
    other = race(
        lambda: job_verbs.backfill(jobs[0], *window),
        lambda: job_verbs.backfill(Job.objects.get(pk=jobs[1].pk), *window),
    )
    with pytest.raises(LimitExceeded) as refused:
        other.result()
    assert refused.value.limit == quotas.BACKFILL
    assert Run.objects.filter(kind="backfill").count() == 3


@pytest.mark.django_db(transaction=True)
def test_two_triggers_racing_for_the_last_one_do_not_both_pass(settings, owner):
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 1
    job = make_job(owner)
    other = race(
        lambda: job_verbs.trigger(job, idempotency_key="first"),
        lambda: job_verbs.trigger(Job.objects.get(pk=job.pk), idempotency_key="second"),
    )
    with pytest.raises(LimitExceeded) as refused:
        other.result()
    assert refused.value.limit == quotas.TRIGGERS
    assert Run.objects.filter(kind="manual").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_retry_and_a_trigger_racing_for_the_last_one_do_not_both_pass(settings, owner):
    settings.PUNCTUAL_TRIGGERS_PER_MINUTE = 1
    job = make_job(owner)
    run = make_run(job, state="failed", attempt=1)
    other = race(
        lambda: Run.objects.get(pk=run.pk).retry(),
        lambda: job_verbs.trigger(Job.objects.get(pk=job.pk), idempotency_key="second"),
    )
    with pytest.raises(LimitExceeded) as refused:
        other.result()
    assert refused.value.limit == quotas.TRIGGERS
    assert not Run.objects.filter(kind="manual").exists()
    assert RetryUse.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_creates_racing_for_the_last_job_do_not_both_pass(settings, owner):
    settings.PUNCTUAL_MAX_JOBS_PER_OWNER = 1

    def create(name: str) -> Callable[[], Job]:
        def body() -> Job:
            with transaction.atomic():
                refusal = quotas.new_jobs_refusal(owner, 1)
                if refusal is not None:
                    raise refusal
                return make_job(owner, name=name)

        return body

    other = race(create("first"), create("second"))
    with pytest.raises(LimitExceeded) as refused:
        other.result()
    assert refused.value.limit == quotas.JOBS
    assert list(Job.objects.values_list("name", flat=True)) == ["first"]


@pytest.mark.django_db(transaction=True)
def test_two_one_statement_creates_racing_for_the_last_job_do_not_both_pass(settings, owner):
    """The API's create: the limit's check is part of the insert statement
    (Job.create_many with ``allowed``), under the owner's row lock."""

    def create(name: str) -> Callable[[], int | None]:
        def body() -> int | None:
            job = Job(owner=owner, name=name, interval_seconds=60, url=PUBLIC_URL)
            job.set_secret("whsec_" + "A" * 43)
            return Job.create_many([job], now=db_now(), changes=[{"name": name}], allowed=1)

        return body

    other = race(create("first"), create("second"))
    assert other.result() == 1  # it waited, then saw the first job: nothing inserted
    assert list(Job.objects.values_list("name", flat=True)) == ["first"]
    assert ScheduleSpan.objects.count() == JobEvent.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_create_holding_the_count_lock_and_a_delete_of_its_name_do_not_deadlock(owner):
    """A create holds its owner's live jobs lock while it inserts; inserting
    the name of a job being deleted waits for that delete. The delete takes
    the same lock before it touches its job, so it waits first, and the
    create finds the name still taken. (Locking only in the count's trigger,
    after the job's row changed, the two waited for each other.)"""
    job = make_job(owner, name="x")
    with pytest.raises(IntegrityError, match="job_unique_name_per_owner"), transaction.atomic():
        quotas.lock_live_jobs(owner.pk)
        other = start(lambda: job_verbs.soft_delete(Job.objects.get(pk=job.pk)))
        wait_until_blocked_or_done(other, "the delete")
        make_job(owner, name="x")
    other.result()
    assert Job.objects.get(pk=job.pk).deleted_at is not None
    assert Job.objects.live().filter(owner=owner).count() == 0
