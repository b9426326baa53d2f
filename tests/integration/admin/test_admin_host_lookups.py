"""The admin's job form looks the URL's host up before Django's transaction
opens (docs/security.md "Host lookups when a job is saved"), on the add and
the change form alike.

The system's own resolver looks ``localhost`` up (from /etc/hosts: no DNS
server is asked), in demo mode, where loopback targets are allowed, so the
form saves. Python's audit hooks see the lookup with the request's
connection as it was then (tests/resolver_watch.py).
"""

from __future__ import annotations

import pytest
from django.db import connections

from jobs.models import Job
from tests.factories import make_job
from tests.integration.admin.test_admin_job_form import ADD, change_url, errors, form_data
from tests.resolver_watch import lookups_seen

LOCAL = "http://localhost:9/hook"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("form", ["add", "change"])
def test_the_form_looks_its_host_up_before_the_transaction(ann, ann_client, settings, form):
    settings.PUNCTUAL_DEMO = True  # localhost is allowed: the form saves
    if form == "add":
        path, data = ADD, form_data(url=LOCAL)
    else:
        job = make_job(ann, name="nightly-report", url="https://93.184.215.14/hook")
        path, data = change_url(job), form_data(url=LOCAL, expected_version=job.version)
    with lookups_seen(connections["default"]) as seen:
        response = ann_client.post(path, data)
    assert response.status_code == 302, errors(response)
    assert Job.objects.get().url == LOCAL
    lookups = [lookup for lookup in seen if lookup.host == "localhost"]
    assert lookups, "the form looked nothing up"
    for lookup in lookups:
        assert not lookup.in_atomic_block, lookup
        assert lookup.transaction_status == "IDLE", lookup
