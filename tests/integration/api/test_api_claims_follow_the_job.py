"""Through the API: a pull worker's claim shares the worker's statement, so a
paused or deleted job's run is not re-delivered after its worker died, and an
overlap policy changed by PATCH holds for the runs that start after it."""

from __future__ import annotations

import datetime as dt

import pytest

from core.db import db_now
from runs import job_verbs, outcomes
from runs.models import Run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

CLAIM = "/api/v1/runs/claim/"


def claim(api, worker: str) -> list[dict]:
    answer = api.post(CLAIM, {"worker": worker, "limit": 10}, format="json")
    assert answer.status_code == 200, answer.json()
    return answer.json()


@pytest.mark.parametrize("stop", ["pause", "delete"])
def test_a_pull_run_of_a_stopped_job_is_not_claimed_again_after_its_worker_died(api, owner, stop):
    job = make_job(owner, target_kind="pull", url="")
    run = job_verbs.trigger(job)
    [first] = claim(api, "w1")
    if stop == "pause":
        assert api.post(f"/api/v1/jobs/{job.pk}/pause/", {}, format="json").status_code == 200
    else:
        assert api.delete(f"/api/v1/jobs/{job.pk}/").status_code == 204
    # w1 died: its lease ran out.
    Run.objects.filter(pk=run.pk).update(lease_until=db_now() - dt.timedelta(seconds=1))

    assert claim(api, "w2") == []
    assert outcomes.cancel_stopped() == 1
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", "paused" if stop == "pause" else "deleted")
    lost = [(first["attempt"], "interrupted")]
    assert list(run.attempts.values_list("number", "outcome")) == lost


@pytest.mark.parametrize("policy", ["skip", "queue"])
def test_an_overlap_policy_patched_to_skip_or_queue_holds_for_runs_made_under_allow(
    api, owner, policy
):
    job = make_job(owner, target_kind="pull", url="", overlap_policy="allow")
    first = api.post(f"/api/v1/jobs/{job.pk}/trigger/").json()
    second = api.post(f"/api/v1/jobs/{job.pk}/trigger/").json()
    answer = api.post(CLAIM, {"worker": "w1", "limit": 1}, format="json").json()
    assert [c["id"] for c in answer] == [first["id"]]

    patched = api.patch(f"/api/v1/jobs/{job.pk}/", {"overlap_policy": policy}, format="json")
    assert patched.status_code == 200

    assert claim(api, "w2") == []  # one run of the job is running
    done = api.post(
        f"/api/v1/runs/{first['id']}/complete/",
        {"worker": "w1", "attempt": 1, "status": "succeeded"},
        format="json",
    )
    assert done.status_code == 200, done.json()
    assert [c["id"] for c in claim(api, "w2")] == [second["id"]]
