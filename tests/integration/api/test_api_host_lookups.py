"""Host lookups when jobs are saved through the API (docs/security.md "Host
lookups when a job is saved"): at most PUNCTUAL_MAX_TARGET_HOSTS distinct
host names per request, refused whole before any lookup; and every lookup
made before the save opens a transaction, the Idempotency-Key's and the
job's row lock included.

The transaction tests use the system's own resolver, on ``localhost`` (from
/etc/hosts, so no DNS server is asked), in demo mode, where loopback targets
are allowed and the save goes through to its write. Python's audit hooks see
each lookup with the request's connection as it was then
(tests/resolver_watch.py). tests/processes/test_host_lookups_deadline.py
shows the deadline against a DNS server that never answers.
"""

from __future__ import annotations

import pytest
from django.db import connections

from jobs import targets
from jobs.models import IdempotencyKey, Job
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL
from tests.resolver_watch import lookups_seen

JOBS = "/api/v1/jobs/"
LOCAL = "http://localhost:9/hook"


def job_body(name: str, url: str = LOCAL) -> dict:
    return {"name": name, "interval_seconds": 60, "url": url}


@pytest.fixture
def recorded(monkeypatch):
    """The host names looked up, through the API tests' stand-in resolver."""
    names: list[str] = []
    stand_in = targets.system_resolve

    def resolve(host: str) -> list[str]:
        names.append(host)
        return stand_in(host)

    monkeypatch.setattr(targets, "system_resolve", resolve)
    return names


@pytest.mark.django_db
def test_more_host_names_than_the_cap_refuse_the_list_before_any_lookup(api, settings, recorded):
    settings.PUNCTUAL_MAX_TARGET_HOSTS = 2
    body = [
        job_body(f"j-{i}", f"https://{host}/hook")
        for i, host in enumerate(["a.example", "b.example", "c.example", "a.example"])
    ]
    answer = api.post(JOBS, body, format="json", HTTP_IDEMPOTENCY_KEY="too-many")
    assert answer.status_code == 400
    assert answer.json() == {
        "non_field_errors": [
            "At most 2 distinct host names per request (got 3); send the jobs in several requests."
        ]
    }
    assert recorded == []
    assert not Job.objects.exists() and not IdempotencyKey.objects.exists()


@pytest.mark.django_db
def test_names_at_the_cap_are_looked_up_each_once_and_addresses_do_not_count(
    api, settings, recorded
):
    settings.PUNCTUAL_DEMO = True  # localhost is allowed
    settings.PUNCTUAL_MAX_TARGET_HOSTS = 2
    hosts = ["localhost", "93.184.215.14", "93.184.215.15", "[2606:4700::1111]", "nowhere.example"]
    body = [job_body(f"j-{i}", f"http://{host}/hook") for i, host in enumerate(hosts * 3)]
    answer = api.post(JOBS, body, format="json")
    # Only the name that does not resolve is refused, in each item naming it.
    assert answer.status_code == 400
    assert answer.json() == {
        str(i): {"url": ["could not resolve nowhere.example"]} for i in (4, 9, 14)
    }
    assert sorted(recorded) == ["localhost", "nowhere.example"]
    recorded.clear()
    settings.PUNCTUAL_MAX_TARGET_HOSTS = 1
    answer = api.post(JOBS, [item for item in body if "nowhere" not in item["url"]], format="json")
    assert answer.status_code == 201
    assert recorded == ["localhost"]
    assert Job.objects.count() == 12


def put_body(name: str) -> dict:
    return {**job_body(name), "description": "replaced"}


SAVES = {
    "create with a key": lambda api, job: api.post(
        JOBS, job_body("new"), format="json", HTTP_IDEMPOTENCY_KEY="one"
    ),
    "bulk create with a key": lambda api, job: api.post(
        JOBS, [job_body("new-1"), job_body("new-2")], format="json", HTTP_IDEMPOTENCY_KEY="two"
    ),
    "put": lambda api, job: api.put(f"{JOBS}{job.pk}/", put_body(job.name), format="json"),
    "patch": lambda api, job: api.patch(f"{JOBS}{job.pk}/", {"url": LOCAL}, format="json"),
}


@pytest.mark.system_resolver
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("save", list(SAVES))
def test_no_transaction_is_open_while_a_save_looks_its_host_up(api, owner, settings, save):
    settings.PUNCTUAL_DEMO = True  # localhost is allowed: the save gets to its write
    job = make_job(owner, name="existing", url=PUBLIC_URL)
    with lookups_seen(connections["default"]) as seen:
        answer = SAVES[save](api, job)
    assert answer.status_code in (200, 201), answer.json()
    lookups = [lookup for lookup in seen if lookup.host == "localhost"]
    assert lookups, "the save looked nothing up"
    for lookup in lookups:
        assert not lookup.in_atomic_block, lookup
        assert lookup.transaction_status == "IDLE", lookup
