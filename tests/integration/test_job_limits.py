"""The admin form and the API accept and refuse exactly the same job field
values (docs/guides/api.md "Input rules"): every limit in jobs/limits.py, walked at its
boundaries (min - 1, min, max, max + 1; max and max + 1 for lengths and the
payload) through both ways in. A refusal names the field and writes nothing."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from jobs.limits import MAX_LENGTHS, RANGES, max_payload_bytes, payload_size
from jobs.models import Job, OwnerLimits
from tests.admin_support import make_owner
from tests.integration.api.support import PUBLIC_URL, token_client

pytestmark = pytest.mark.django_db

ADD = reverse("admin:jobs_job_add")
JOBS = "/api/v1/jobs/"
NULL = None  # an empty field in the admin, null in the API

# Valid values of every field the cases vary, as the API takes them.
BASE = {
    "name": "limits",
    "description": "",
    "cron": None,
    "interval_seconds": 300,
    "url": PUBLIC_URL,
    "payload": {},
    "timeout_seconds": 30,
    "max_attempts": 3,
    "retry_backoff_seconds": 10,
    "max_catchup": 3,
    "misfire_grace_seconds": 60,
    "jitter_seconds": 0,
    "pause_after_failures": None,
}


def text(field: str, length: int) -> str:
    """A value of ``field`` that is valid but for its length."""
    if field == "cron":
        # "0,0,...,0 2 * * *" (or "00,0,..."): a daily cron of any length >= 9.
        head = "0" if length % 2 else "00"
        return head + ",0" * ((length - len(head) - 8) // 2) + " 2 * * *"
    if field == "url":
        return PUBLIC_URL + "/" + "a" * (length - len(PUBLIC_URL) - 1)
    return "x" * length


def payload_of(size: int) -> dict:
    body = {"p": ""}
    body["p"] = "x" * (size - payload_size(body))
    return body


def cases() -> list[tuple[str, object, bool]]:
    """(field, value, valid) for every limit."""
    out = []
    for field, bounds in RANGES.items():
        for value in (bounds.min - 1, bounds.min, bounds.max, bounds.max + 1):
            out.append((field, value, bounds.min <= value <= bounds.max))
    out.append(("pause_after_failures", NULL, True))
    for field, length in MAX_LENGTHS.items():
        if field == "timezone":
            continue  # a choice among zone names in the admin, not free text
        out.append((field, text(field, length), True))
        out.append((field, text(field, length + 1), False))
    out.append(("payload", payload_of(max_payload_bytes()), True))
    out.append(("payload", payload_of(max_payload_bytes() + 1), False))
    return out


def body_for(field: str, value) -> dict:
    body = {**BASE, field: value}
    if field == "cron":
        body["interval_seconds"] = None  # exactly one schedule
    return body


def admin_data(body: dict) -> dict:
    data = {
        "timezone": "UTC",
        "start_at_0": "",
        "start_at_1": "",
        "target_kind": "webhook",
        "misfire_policy": "skip",
        "overlap_policy": "skip",
    }
    for field, value in body.items():
        if field == "payload":
            data[field] = json.dumps(value)
        else:
            data[field] = "" if value is None else str(value)
    return data


def through_admin(client: Client, body: dict) -> tuple[bool, dict]:
    response = client.post(ADD, admin_data(body))
    if response.status_code == 302:
        return True, {}
    assert response.status_code == 200, response.status_code
    return False, dict(response.context["adminform"].form.errors)


def through_api(api, body: dict) -> tuple[bool, dict]:
    response = api.post(JOBS, body, format="json")
    if response.status_code == 201:
        return True, {}
    assert response.status_code == 400, response.content[:300]
    return False, response.json()


CASES = cases()


def _id(case) -> str:
    field, value, valid = case
    shown = value if isinstance(value, int) or value is None else f"len {len(str(value))}"
    if field == "payload":
        shown = f"{payload_size(value)} bytes"
    return f"{field}={shown}-{'ok' if valid else 'refused'}"


def test_every_limit_has_its_boundaries_walked():
    limited = {field for field, _, _ in CASES}
    assert limited == set(RANGES) | (set(MAX_LENGTHS) - {"timezone"}) | {"payload"}


@pytest.mark.parametrize("field,value,valid", CASES, ids=[_id(c) for c in CASES])
def test_admin_and_api_agree_at_each_boundary(field, value, valid):
    owner = make_owner("limits-owner")
    # The field's own bounds: the owner's minimum interval (docs/guides/owners.md
    # "Owner limits", tests/integration/test_owner_limits.py) is lowered to them.
    OwnerLimits.objects.create(owner=owner, min_interval_seconds=RANGES["interval_seconds"].min)
    admin = Client()
    admin.force_login(owner)
    api = token_client(owner)
    body = body_for(field, value)
    for name, send in (
        ("admin", lambda: through_admin(admin, body)),
        ("api", lambda: through_api(api, body)),
    ):
        accepted, errors = send()
        assert accepted == valid, (name, errors)
        jobs = Job.objects.filter(owner=owner)
        if valid:
            assert list(jobs.values_list(field, flat=True)) == [value], name
            jobs.delete()
        else:
            assert field in errors, (name, errors)
            assert not jobs.exists(), name


@pytest.mark.parametrize(
    "field,value,valid",
    [c for c in CASES if c[0] in RANGES],
    ids=[_id(c) for c in CASES if c[0] in RANGES],
)
def test_the_model_validators_hold_the_same_ranges(field, value, valid):
    """Any other ModelForm (or full_clean) gets the same bounds from the model."""
    job = Job(**body_for(field, value))
    others = [f.name for f in Job._meta.fields if f.name != field]
    if valid:
        job.clean_fields(exclude=others)
    else:
        with pytest.raises(ValidationError) as refused:
            job.clean_fields(exclude=others)
        assert list(refused.value.message_dict) == [field]
