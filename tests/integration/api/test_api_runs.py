"""The runs API: newest-first cursor lists with filters, detail with attempts,
and the operator retry."""

from __future__ import annotations

import datetime as dt

import pytest

from runs import job_verbs
from runs.models import Attempt, Run
from tests.factories import at, make_job

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs/"
T0 = at("2026-01-01T00:00:00")


def make_runs(job, n: int, *, kind: str = "backfill") -> list[Run]:
    fires = [T0 + dt.timedelta(minutes=i) for i in range(n)]
    Run.objects.create_for_fires(job, fires, kind=kind)
    return list(Run.objects.filter(job=job).order_by("-scheduled_at"))


def test_runs_are_listed_newest_fire_first_across_cursor_pages(api, owner):
    runs = make_runs(make_job(owner), 5)
    first = api.get(RUNS, {"page_size": 2}).json()
    second = api.get(first["next"]).json()
    third = api.get(second["next"]).json()
    listed = [r["id"] for page in (first, second, third) for r in page["results"]]
    assert listed == [str(r.pk) for r in runs]
    assert third["next"] is None
    assert "count" not in first  # a cursor: no COUNT(*) over the runs table


def test_runs_filter_by_job_state_and_kind(api, owner):
    job, other = make_job(owner), make_job(owner)
    make_runs(job, 2)
    manual = job_verbs.trigger(other)
    Run.objects.filter(pk=manual.pk).update(state="failed")

    def ids(**query):
        return {r["id"] for r in api.get(RUNS, query).json()["results"]}

    assert ids(job=str(other.pk)) == {str(manual.pk)}
    assert ids(state="failed") == {str(manual.pk)}
    assert ids(kind="backfill") == {str(r.pk) for r in Run.objects.filter(job=job)}
    assert ids(kind="backfill", state="failed") == set()


def test_bad_filters_are_a_400_naming_the_parameter(api):
    answer = api.get(RUNS, {"job": "nope", "state": "asleep", "kind": 3})
    assert answer.status_code == 400
    assert set(answer.json()) == {"job", "state", "kind"}


def test_a_job_s_runs(api, owner):
    job, other = make_job(owner), make_job(owner)
    make_runs(job, 3)
    make_runs(other, 2)
    answer = api.get(f"/api/v1/jobs/{job.pk}/runs/", {"kind": "backfill"}).json()
    assert len(answer["results"]) == 3
    assert {r["job"] for r in answer["results"]} == {str(job.pk)}
    assert answer["results"][0]["job_name"] == job.name


def test_run_detail_has_its_attempts(api, owner):
    [run] = make_runs(make_job(owner), 1)
    Attempt.objects.create(run=run, number=1, worker="w", outcome="failed", status_code=503)
    answer = api.get(f"{RUNS}{run.pk}/").json()
    assert answer["id"] == str(run.pk)
    assert [(a["number"], a["outcome"], a["status_code"]) for a in answer["attempts"]] == [
        (1, "failed", 503)
    ]


@pytest.mark.parametrize("state", ["failed", "missed"])
def test_retry_puts_a_failed_or_missed_run_back_to_pending_with_the_same_id(api, owner, state):
    [run] = make_runs(make_job(owner, max_attempts=2), 1)
    Run.objects.filter(pk=run.pk).update(state=state, attempt=2, finished_at=T0)
    answer = api.post(f"{RUNS}{run.pk}/retry/")
    assert answer.status_code == 200
    assert (answer.json()["id"], answer.json()["state"]) == (str(run.pk), "pending")
    run.refresh_from_db()
    assert (run.state, run.max_attempts, run.finished_at) == ("pending", 4, None)
    assert run.job.events.filter(action="run_retried").exists()


@pytest.mark.parametrize("state", ["pending", "running", "retrying", "succeeded", "cancelled"])
def test_retry_of_any_other_state_is_a_409(api, owner, state):
    [run] = make_runs(make_job(owner), 1)
    Run.objects.filter(pk=run.pk).update(state=state)
    answer = api.post(f"{RUNS}{run.pk}/retry/")
    assert answer.status_code == 409 and "detail" in answer.json()
    run.refresh_from_db()
    assert run.state == state


def test_retry_of_a_deleted_job_s_run_is_a_409(api, owner):
    job = make_job(owner)
    [run] = make_runs(job, 1)
    Run.objects.filter(pk=run.pk).update(state="failed")
    job_verbs.soft_delete(job)
    assert api.post(f"{RUNS}{run.pk}/retry/").status_code == 409


def test_lists_cost_a_fixed_number_of_queries(api, owner, django_assert_max_num_queries, unlimited):
    for _ in range(3):
        make_runs(make_job(owner), 2)
    api.get(RUNS)  # warm up: token and session lookups are the same every time
    for url in (RUNS, "/api/v1/jobs/"):
        with django_assert_max_num_queries(6):
            answer = api.get(url)
        assert len(answer.json()["results"]) in (3, 6)
    for _ in range(10):
        make_runs(make_job(owner), 2)
    for url in (RUNS, "/api/v1/jobs/"):
        with django_assert_max_num_queries(6):
            assert len(api.get(url).json()["results"]) > 6
