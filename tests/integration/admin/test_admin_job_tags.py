"""Tags in the admin: set in the job form (refused in the API's words, with
nothing written), shown as chips in the jobs list, and filtered by
(``?tag=``, the API's ``?tag=`` too). The list's search reads the name, the
URL and the description, as the API's ``?search=``."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from jobs.models import Job
from tests.factories import make_job
from tests.integration.admin.test_admin_job_form import ADD, change_url, errors, form_data
from tests.integration.admin.test_admin_jobs_list import LIST, get, rows
from tests.integration.api.support import token_client

pytestmark = pytest.mark.django_db


def test_the_form_saves_tags_lower_cased_once_each(ann, ann_client):
    response = ann_client.post(ADD, form_data(tags="Team:Billing, nightly  team:billing"))
    assert response.status_code == 302, errors(response)
    job = Job.objects.get(name="nightly-report")
    assert job.tags == ["team:billing", "nightly"]
    page = ann_client.get(change_url(job)).content.decode()
    assert 'value="team:billing, nightly"' in page
    # An edit that leaves the box as shown changes nothing.
    data = form_data(tags="team:billing, nightly", expected_version=str(job.version))
    assert ann_client.post(change_url(job), data).status_code == 302
    job.refresh_from_db()
    assert job.version == 1


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("ok, not!ok", "“not!ok” is not a tag"),
        (", ".join(f"t{n}" for n in range(11)), "At most 10 tags per job (got 11)."),
        ("x" * 41, "is longer than 40 characters"),
    ],
)
def test_bad_tags_are_a_form_error_on_the_field_and_nothing_is_written(
    ann, ann_client, text, fragment
):
    assert fragment in " ".join(errors(ann_client.post(ADD, form_data(tags=text)))["tags"])
    assert not Job.objects.exists()

    job = make_job(ann, name="kept", tags=["old"])
    data = form_data(name="kept", tags=text, expected_version=str(job.version))
    assert fragment in " ".join(errors(ann_client.post(change_url(job), data))["tags"])
    job.refresh_from_db()
    assert job.tags == ["old"] and job.version == 1


def test_the_admin_and_the_api_refuse_a_bad_tag_in_the_same_words(ann, ann_client):
    form_words = errors(ann_client.post(ADD, form_data(tags="not!ok")))["tags"]
    body = {"name": "x", "interval_seconds": 60, "url": "https://93.184.215.14/h"}
    answer = token_client(ann).post("/api/v1/jobs/", {**body, "tags": ["not!ok"]}, format="json")
    assert answer.json()["tags"] == form_words


def test_the_list_shows_tags_as_chips_that_filter_by_them(ann, ann_client):
    make_job(ann, name="billing-nightly", tags=["team:billing", "nightly"])
    make_job(ann, name="billing-hourly", tags=["team:billing"])
    make_job(ann, name="untagged")
    page = get(ann_client)
    chip = re.search(r'<a class="punctual-tag" href="([^"]+)">nightly</a>', page)
    assert chip, "the nightly chip"
    assert rows(ann_client.get(chip.group(1).replace("&amp;", "&")).content.decode()) == [
        "billing-nightly"
    ]
    assert rows(get(ann_client, tag="team:billing")) == ["billing-hourly", "billing-nightly"]
    assert rows(get(ann_client, tag="TEAM:billing")) == ["billing-hourly", "billing-nightly"]
    assert rows(get(ann_client, tag="absent")) == []
    filtered = get(ann_client, tag="nightly")
    assert 'id="tag-filter" value="nightly"' in filtered and 'id="tag-filter-clear"' in filtered


def test_a_bad_tag_in_the_address_is_a_400_page_saying_why(ann, ann_client):
    make_job(ann, tags=["ok"])
    response = ann_client.get(reverse(LIST), {"tag": "not ok!"})
    assert response.status_code == 400
    assert "“not ok!” is not a tag" in response.content.decode()


def test_the_tag_filter_keeps_to_the_owners_jobs(ann, ben, ann_client):
    make_job(ann, name="mine", tags=["shared"])
    make_job(ben, name="theirs", tags=["shared"])
    assert rows(get(ann_client, tag="shared")) == ["mine"]


def test_the_search_box_reads_the_name_url_and_description(ann, ann_client):
    make_job(ann, name="invoices", url="https://93.184.215.14/billing/run")
    make_job(ann, name="reports", description="Sends the Billing summary")
    make_job(ann, name="cleanup")
    assert rows(get(ann_client, q="billing")) == ["invoices", "reports"]
    assert rows(get(ann_client, q="billing SUMMARY")) == ["reports"]
    api = token_client(ann).get("/api/v1/jobs/", {"search": "billing"}).json()
    assert [job["name"] for job in api["results"]] == ["invoices", "reports"]
