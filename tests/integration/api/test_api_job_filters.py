"""Finding jobs through the API: GET /api/v1/jobs/ filtered by state, target
kind, tags and words, as the admin's jobs list is; an unknown parameter or a
bad value is a 400 naming it. And tags: set, normalized and refused the same
through create, bulk create and update, with nothing written on a refusal."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from core.db import db_now
from jobs.models import Job, JobEvent
from runs import job_verbs
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL
from tests.plans import explaining

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def names(api, **params) -> list[str]:
    answer = api.get(JOBS, params)
    assert answer.status_code == 200, answer.json()
    return [job["name"] for job in answer.json()["results"]]


def refusal(api, params) -> dict:
    answer = api.get(JOBS, params)
    assert answer.status_code == 400, answer.json()
    return answer.json()


def test_state_filter_lists_only_jobs_in_that_state(api, owner):
    make_job(owner, name="running-a")
    job_verbs.pause(make_job(owner, name="stopped-b"), actor=owner)
    assert names(api, state="paused") == ["stopped-b"]
    assert names(api, state="active") == ["running-a"]
    assert names(api) == ["running-a", "stopped-b"]


def test_target_kind_filter_lists_only_that_kind(api, owner):
    make_job(owner, name="hook")
    make_job(owner, name="queue", target_kind="pull", url="")
    assert names(api, target_kind="pull") == ["queue"]
    assert names(api, target_kind="webhook") == ["hook"]


def test_repeated_tags_narrow_to_jobs_that_carry_all_of_them(api, owner):
    make_job(owner, name="both", tags=["team:billing", "nightly"])
    make_job(owner, name="billing-only", tags=["team:billing"])
    make_job(owner, name="untagged")
    assert names(api, tag="team:billing") == ["billing-only", "both"]
    assert names(api, tag=["team:billing", "nightly"]) == ["both"]
    # Tags are lower-cased on the way in, and so is the filter.
    assert names(api, tag="NIGHTLY") == ["both"]
    assert names(api, tag="absent") == []


def untagged_jobs(owner, count: int) -> list[Job]:
    jobs = [
        Job(owner=owner, name=f"plain-{n}", interval_seconds=60, url=PUBLIC_URL)
        for n in range(count)
    ]
    Job.create_many(jobs, now=db_now(), changes=[{}] * count)
    return jobs


def test_the_tag_filter_reads_the_tag_index_of_the_tagged_jobs(api, owner):
    """job_tags_idx holds the tagged jobs only (jobs/migrations/0018); the
    filter states that condition (JobQuerySet.tagged), or the planner could
    not use the index and would read every job of the owner."""
    make_job(owner, name="both", tags=["team:billing", "nightly"])
    make_job(owner, name="billing-only", tags=["team:billing"])
    untagged_jobs(owner, 2_000)
    with connection.cursor() as cur:
        cur.execute("ANALYZE jobs_job")
    with explaining(lambda sql: '"tags" @>' in sql) as statements:
        assert names(api, tag="nightly") == ["both"]
    assert statements
    assert all("job_tags_idx" in s.indexes_read() for s in statements), [
        s.indexes_read() for s in statements
    ]


def test_the_fires_of_untagged_jobs_write_nothing_to_the_tag_index(owner):
    """Every fire updates its job's row, and a GIN index of every job took an
    entry for each new row of an untagged job too: the index grew with the
    fires of jobs that have no tag."""

    def size() -> int:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_relation_size('job_tags_idx')")
            return cur.fetchone()[0]

    before = size()
    jobs = untagged_jobs(owner, 2_000)
    with connection.cursor() as cur:
        for _ in range(3):
            cur.execute(
                "UPDATE jobs_job SET next_fire_at = next_fire_at + interval '1 minute'"
                " WHERE id = ANY(%s)",
                [[job.pk for job in jobs]],
            )
    assert size() == before


def test_search_finds_every_word_in_the_name_url_or_description(api, owner):
    make_job(owner, name="invoices", url="https://93.184.215.14/billing/run")
    make_job(owner, name="reports", description="Sends the Billing summary")
    make_job(owner, name="cleanup", url=PUBLIC_URL)
    assert names(api, search="billing") == ["invoices", "reports"]
    assert names(api, search="BILLING summary") == ["reports"]
    assert names(api, search="invoi") == ["invoices"]
    assert names(api, search="") == ["cleanup", "invoices", "reports"]


def test_filters_combine_and_keep_to_the_owners_jobs(api, owner, other_owner):
    make_job(owner, name="mine", tags=["x"], target_kind="pull", url="")
    make_job(owner, name="mine-hook", tags=["x"])
    make_job(other_owner, name="theirs", tags=["x"], target_kind="pull", url="")
    assert names(api, tag="x", target_kind="pull", state="active", search="mi") == ["mine"]


def test_an_unknown_query_parameter_is_a_400_naming_it(api, owner):
    make_job(owner, name="a")
    job_verbs.pause(make_job(owner, name="b"), actor=owner)
    body = refusal(api, {"stat": "paused"})
    assert list(body) == ["stat"] and "Unknown query parameter" in body["stat"][0]
    assert list(refusal(api, {"q": "a", "state": "paused"})) == ["q"]
    # What every list takes still works: the page size, the cursor, ?format=.
    first = api.get(JOBS, {"page_size": 1, "format": "json", "state": "active"})
    assert first.status_code == 200 and [j["name"] for j in first.json()["results"]] == ["a"]
    assert api.get(first.json()["next"] or JOBS, {}).status_code == 200
    everything = api.get(JOBS, {"page_size": 1}).json()
    assert api.get(everything["next"]).json()["results"][0]["name"] == "b"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "nonsense"}, "state"),
        ({"state": ["active", "paused"]}, "state"),
        ({"target_kind": "ftp"}, "target_kind"),
        ({"tag": "Not a tag!"}, "tag"),
        ({"tag": ""}, "tag"),
        ({"tag": "x" * 41}, "tag"),
        ({"search": "x" * 201}, "search"),
    ],
)
def test_a_bad_filter_value_is_a_400_naming_the_parameter(api, owner, params, field):
    make_job(owner)
    assert list(refusal(api, params)) == [field]


def test_tags_are_set_on_create_and_update_lower_cased_once_each(api):
    created = api.post(
        JOBS,
        {
            "name": "tagged",
            "interval_seconds": 60,
            "url": PUBLIC_URL,
            "tags": ["Team:Billing", " nightly ", "team:billing"],
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    assert created.json()["tags"] == ["team:billing", "nightly"]
    job = Job.objects.get(name="tagged")
    assert job.tags == ["team:billing", "nightly"]

    patched = api.patch(f"{JOBS}{job.pk}/", {"tags": ["env.prod"]}, format="json")
    assert patched.status_code == 200 and patched.json()["tags"] == ["env.prod"]
    event = JobEvent.objects.filter(job=job, action="updated").get()
    assert event.changes == {"tags": [["team:billing", "nightly"], ["env.prod"]]}
    # A PUT without tags puts them back to none, as any omitted optional field.
    put = api.put(
        f"{JOBS}{job.pk}/",
        {"name": "tagged", "interval_seconds": 60, "url": PUBLIC_URL},
        format="json",
    )
    assert put.status_code == 200 and put.json()["tags"] == []


BAD_TAGS = [
    "a string, not a list",
    ["has space"],
    ["UPPER_is_fine_but_!_is_not"],
    [""],
    ["-leading-dash"],
    ["x" * 41],
    [f"tag-{n}" for n in range(11)],
    [7],
]


@pytest.mark.parametrize("tags", BAD_TAGS)
def test_bad_tags_are_a_400_naming_the_field_and_nothing_is_written(api, owner, tags):
    job = make_job(owner, name="kept", tags=["old"])
    item = {"name": "new", "interval_seconds": 60, "url": PUBLIC_URL, "tags": tags}

    single = api.post(JOBS, item, format="json")
    assert single.status_code == 400 and list(single.json()) == ["tags"], single.json()
    bulk = api.post(JOBS, [{**item, "name": "fine", "tags": []}, item], format="json")
    assert bulk.status_code == 400 and bulk.json() == {"1": {"tags": single.json()["tags"]}}
    assert list(Job.objects.values_list("name", flat=True)) == ["kept"]

    patch = api.patch(f"{JOBS}{job.pk}/", {"tags": tags}, format="json")
    assert patch.status_code == 400 and list(patch.json()) == ["tags"]
    job.refresh_from_db()
    assert job.tags == ["old"] and job.version == 1


def test_the_database_refuses_more_than_10_tags(owner):
    job = make_job(owner, tags=[f"t{n}" for n in range(10)])
    with pytest.raises(IntegrityError, match="job_at_most_10_tags"), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(tags=[f"t{n}" for n in range(11)])


def test_the_export_carries_tags_into_a_bulk_create(api, other_api, owner, other_owner):
    make_job(owner, name="tagged", url=PUBLIC_URL, tags=["team:billing", "nightly"])
    [exported] = api.get(f"{JOBS}export/").json()
    assert exported["tags"] == ["team:billing", "nightly"]
    assert other_api.post(JOBS, [exported], format="json").status_code == 201
    assert Job.objects.get(owner=other_owner).tags == ["team:billing", "nightly"]
