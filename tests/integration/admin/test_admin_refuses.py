"""The admin refuses what the API refuses, with the same messages, and never answers 500
(docs/guides/api.md "Input rules").

Three tables, each walked as a job owner and as a superuser, with DEBUG off as in
production; the test client raises any exception a view lets out, so a 500
fails the test before its status is even looked at:

- hostile values of every field of the job form, posted to the real add (and,
  for payloads and start times, change) form: each is a form error on its
  field and writes nothing; where the API can be sent the very same value,
  the admin's message is the API's, word for word;
- hostile list queries on every registered changelist (whatever is
  registered): NUL characters anywhere, invalid ``__regex``, years and page
  numbers out of range, selections that are not ids: a 4xx page that says why;
- a payload too deep for the rules, stored before them, can no longer be
  stored through either way in.
"""

from __future__ import annotations

import json

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from core import strict_json
from jobs.models import Job, JobEvent, JobState
from tests.factories import make_job
from tests.integration.admin.test_admin_job_form import form_data
from tests.integration.api.support import PUBLIC_URL, token_client

pytestmark = pytest.mark.django_db

ADD = reverse("admin:jobs_job_add")
JOBS = "/api/v1/jobs/"


@pytest.fixture(autouse=True)
def _production_like(settings):
    # Production runs with DEBUG off: error pages and template errors behave as there.
    settings.DEBUG = False


@pytest.fixture(params=["owner", "superuser"])
def user(request, ann, root):
    return {"owner": ann, "superuser": root}[request.param]


@pytest.fixture
def client(user) -> Client:
    client = Client()
    client.force_login(user)
    assert client.raise_request_exception  # an exception in a view fails the test
    return client


def admin_form(user, **overrides) -> dict:
    data = form_data(**overrides)
    if user.is_superuser:
        data.setdefault("owner", str(user.pk))
    return data


def form_errors(response) -> dict[str, list[str]]:
    assert response.status_code == 200, f"expected the form back, got {response.status_code}"
    form = response.context["adminform"].form
    return {field: list(messages) for field, messages in form.errors.items()}


def api_messages(user, body: bytes) -> list[str]:
    """Every message of the API's 400 for this raw JSON body."""
    answer = token_client(user).generic("POST", JOBS, body, content_type="application/json")
    assert answer.status_code == 400, answer.content[:300]
    found: list[str] = []
    for value in answer.json().values():
        found += value if isinstance(value, list) else [value]
    return found


def written() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


# -- payloads: the API's message, word for word ------------------------------------

PAYLOADS = {
    "NaN": '{"x": NaN}',
    "Infinity": '{"x": Infinity}',
    "-Infinity": '{"x": -Infinity}',
    "1e400": '{"x": 1e400}',
    "NUL in a value": '{"x": "a\\u0000b"}',
    "NUL in a key": '{"a\\u0000b": 1}',
    "lone surrogate": '{"x": "\\ud800"}',
    "lone low surrogate in a key": '{"\\udfff": 1}',
    "5,000-digit number": '{"x": ' + "9" * 5000 + "}",
    "5,000-digit negative number": '{"x": -' + "9" * 5000 + "}",
    "nested 32 deep": '{"x": ' + "[" * 31 + "]" * 31 + "}",
    "nested 900 deep": '{"x": ' + "[" * 900 + "]" * 900 + "}",
    "nested 5,000 deep": '{"x": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}",
    "repeated key": '{"x": 1, "x": 2}',
    "a list": "[1, 2]",
    "a string": '"text"',
    "a number": "7",
    "not JSON": "{x: 1}",
    "over 64 KiB": json.dumps({"x": "y" * (64 * 1024)}),
}


def api_body(payload_text: str) -> bytes:
    """A valid job whose payload field is exactly ``payload_text``."""
    head = json.dumps({"name": "hostile", "interval_seconds": 60, "url": PUBLIC_URL})
    return (head[:-1] + ', "payload": ' + payload_text + "}").encode()


@pytest.mark.parametrize("text", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_a_hostile_payload_is_refused_with_the_apis_message(client, user, text):
    before = written()
    errors = form_errors(client.post(ADD, admin_form(user, payload=text)))
    assert list(errors) == ["payload"], errors
    assert written() == before
    if text == PAYLOADS["not JSON"]:
        # Not JSON at all: the API cannot be sent it as a payload, only as a bad body.
        assert errors["payload"][0].startswith("Not valid JSON: ")
        return
    assert errors["payload"][0] in api_messages(user, api_body(text))
    assert written() == before


@pytest.mark.parametrize(
    "text", [PAYLOADS["NaN"], PAYLOADS["nested 900 deep"], PAYLOADS["5,000-digit number"]]
)
def test_a_hostile_payload_never_replaces_a_stored_one(client, user, text):
    job = make_job(user, name="kept", payload={"kept": True})
    change = reverse("admin:jobs_job_change", args=[job.pk])
    data = admin_form(user, name="kept", payload=text, expected_version=str(job.version))
    assert "payload" in form_errors(client.post(change, data))
    patch = token_client(user).generic(
        "PATCH", f"{JOBS}{job.pk}/", b'{"payload": ' + text.encode() + b"}", "application/json"
    )
    assert patch.status_code == 400
    job.refresh_from_db()
    assert (job.payload, job.version) == ({"kept": True}, 1)


def test_the_rule_sits_where_the_api_puts_a_payload():
    """The deepest payload both accept: its innermost array is level 32 of an API body."""
    deepest = '{"x": ' + "[" * 30 + "]" * 30 + "}"
    assert strict_json.problem(json.loads(api_body(deepest))) is None
    assert strict_json.problem(json.loads(api_body(PAYLOADS["nested 32 deep"]))) is not None


@pytest.mark.parametrize(
    "date,time,api",
    [
        ("0001-01-01", "00:00:00", "0001-01-01T00:00:00Z"),
        ("1969-12-31", "23:59:59", "1969-12-31T23:59:59Z"),
        ("9000-01-01", "00:00:00", "9000-01-01T00:00:00Z"),
        ("9999-12-31", "23:59:59", "9999-12-31T23:59:59Z"),
    ],
)
def test_a_start_at_out_of_range_is_refused_with_the_apis_message(client, user, date, time, api):
    before = written()
    data = admin_form(user, start_at_0=date, start_at_1=time)
    errors = form_errors(client.post(ADD, data))
    assert list(errors) == ["start_at"], errors
    body = json.dumps({"name": "t", "interval_seconds": 60, "url": PUBLIC_URL, "start_at": api})
    assert errors["start_at"] == api_messages(user, body.encode())
    assert written() == before


# -- every other field -------------------------------------------------------------

HUGE = "9" * 30
# (field, value in the form, the same value as the API takes it, or None when
# the API has no such value: text where it wants a number, say).
FIELDS = [
    ("name", "x" * 201, "x" * 201),
    ("name", "x" * 100_000, "x" * 100_000),
    ("name", "a\x00b", "a\x00b"),
    ("name", "", None),
    ("description", "d" * 2001, "d" * 2001),
    ("description", "a\x00b", "a\x00b"),
    ("cron", "0 2 * * *\x00", "0 2 * * *\x00"),
    ("cron", "1" * 101, None),
    ("cron", "not a cron", "not a cron"),
    ("timezone", "UTC\x00", None),
    ("timezone", "Mars/Olympus", None),
    ("timezone", "x" * 10_000, None),
    ("url", PUBLIC_URL + "\x00", PUBLIC_URL + "\x00"),
    ("url", PUBLIC_URL + "/" + "a" * 2001, PUBLIC_URL + "/" + "a" * 2001),
    ("url", "ftp://93.184.215.14/x", "ftp://93.184.215.14/x"),
    ("url", "http://127.0.0.1/", "http://127.0.0.1/"),
    ("target_kind", "email", None),
    ("target_kind", "\x00", None),
    ("misfire_policy", "never", None),
    ("misfire_policy", "\x00", None),
    ("overlap_policy", "x" * 10_000, None),
    ("start_at_0", "\x00", None),
    ("start_at_0", "2026-13-01", None),
    ("start_at_1", "25:00:00", None),
    ("run_at_0", "\x00", None),
    ("run_at_0", "2026-02-30", None),
    ("run_at_1", "12:61:00", None),
    ("end_at_0", "\x00", None),
    ("end_at_0", "0000-01-01", None),
    ("end_at_1", "x" * 10_000, None),
    ("expected_version", "abc", None),
    ("tags", "\x00", None),
    ("tags", "x" * 10_000, ["x" * 10_000]),
    ("tags", "ok, not!ok", ["ok", "not!ok"]),
    ("tags", " ".join(f"t{n}" for n in range(11)), [f"t{n}" for n in range(11)]),
    ("method", "FETCH", None),
    ("method", "\x00", None),
    ("body_mode", "raw", None),
    ("body_mode", "x" * 10_000, None),
    ("auth_kind", "digest", None),
    ("auth_kind", "\x00", None),
    ("headers", "no colon here", None),
    ("headers", "Host: example.com", None),
    ("headers", "X-Key: a\x00b", None),
    ("headers", "X-Key: 1\nx-key: 2", None),
    ("auth_token", "two words", "two words"),
    ("auth_token", "a\x00b", None),
    ("auth_username", "a:b", "a:b"),
    ("auth_password", "p" * 10_000, "p" * 10_000),
    ("owner", "\x00", None),
    ("owner", HUGE, None),
    ("owner", "abc", None),
    # Not a channel of the owner's (none exist here), not an id at all.
    ("alert_channels", "1", None),
    ("alert_channels", "abc", None),
    ("alert_channels", "\x00", None),
    ("alert_channels", HUGE, None),
]
for _field in (
    "interval_seconds",
    "timeout_seconds",
    "max_attempts",
    "retry_backoff_seconds",
    "max_catchup",
    "misfire_grace_seconds",
    "jitter_seconds",
    "pause_after_failures",
):
    FIELDS += [
        (_field, "abc", None),
        (_field, "1e5", None),
        (_field, "\x00", None),
        (_field, "9" * 5000, None),
        (_field, HUGE, int(HUGE)),
        (_field, "-" + HUGE, -int(HUGE)),
    ]


def _field_id(case) -> str:
    field, value, _ = case
    shown = repr(value) if len(value) <= 24 else f"{value[:8]!r}..len {len(value)}"
    return f"{field}={shown}"


@pytest.mark.parametrize("field,value,api", FIELDS, ids=[_field_id(c) for c in FIELDS])
def test_a_hostile_field_is_a_form_error_and_writes_nothing(client, user, field, value, api):
    if field == "owner" and not user.is_superuser:
        pytest.skip("only a superuser's form has an owner field")
    overrides = {field: value}
    time = next((t for t in ("start_at", "run_at", "end_at") if field.startswith(t)), None)
    if time is not None:
        overrides = {f"{time}_0": "2026-01-01", f"{time}_1": "00:00:00", **overrides}
    if field == "cron" or time == "run_at":
        overrides["interval_seconds"] = ""
    before = written()
    errors = form_errors(client.post(ADD, admin_form(user, **overrides)))
    named = time or field
    if field == "expected_version":
        named = "expected_version"
    assert named in errors, errors
    assert written() == before
    if api is not None:
        body = {"name": "t", "interval_seconds": 60, "url": PUBLIC_URL, field: api}
        if field == "cron":
            body["interval_seconds"] = None
        assert errors[named][0] in api_messages(user, json.dumps(body).encode())
        assert written() == before


def test_every_job_form_field_has_hostile_cases():
    from console.forms import JobForm

    covered = {field.split("_0")[0].split("_1")[0] for field, _, _ in FIELDS} | {"payload"}
    assert set(JobForm.base_fields) | {"owner"} <= covered


# -- every list ----------------------------------------------------------------------


def changelists() -> list[str]:
    return [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for model in admin.site._registry
    ]


# (query, status, words the refusal page shows)
QUERIES = [
    ("q=%00", 400, "NUL characters"),
    ("name=%00", 400, "“name”"),
    ("state=%00", 400, "NUL characters"),
    ("state__exact=%00", 400, "NUL characters"),
    ("payload__x=%00", 400, "NUL characters"),
    ("o=%00", 400, "NUL characters"),
    ("p=%00", 400, "NUL characters"),
    ("%00=1", 400, "NUL characters"),
    ("e=%00", 400, "NUL characters"),
    ("name__regex=(", 400, "cannot be applied"),
    ("id__exact=zz", 400, "cannot be applied"),
    ("id__in=zz", 400, "cannot be applied"),
    ("created_at__year=99999", 400, "cannot be applied"),
    ("nonexistent_field=1", 400, "cannot be applied"),
    ("p=99999999999999999999999", 404, "There is no page"),
]


def _expected(client: Client, url: str, status: int) -> set[int]:
    """A list the user may not see is a 403 whatever the query; a page past the
    end of a list that fits on one page is that page (Django's normal)."""
    plain = client.get(url).status_code
    if plain == 403:
        return {403}
    assert plain == 200, (url, plain)
    return {status, 200} if status == 404 else {status}


@pytest.mark.parametrize("query,status,words", QUERIES, ids=[q for q, _, _ in QUERIES])
def test_a_hostile_list_query_is_a_4xx_on_every_list(client, user, query, status, words):
    make_job(user, name="listed")
    refused = 0
    for url in changelists():
        expected = _expected(client, url, status)
        answer = client.get(f"{url}?{query}")
        assert answer.status_code in expected, (url, query, answer.status_code)
        if answer.status_code == status:
            refused += 1
            assert words in answer.content.decode(), (url, answer.content[:500])
    # Jobs, runs and events, at least, refused it; past the last page, the big
    # lists (runs, events) at least, as the jobs list fits on one page.
    assert refused >= (2 if status == 404 else 3)


def test_a_page_past_bigint_on_a_big_list_is_a_404(client, user):
    for name in ("admin:runs_run_changelist", "admin:jobs_jobevent_changelist"):
        answer = client.get(reverse(name) + "?p=99999999999999999999999")
        assert answer.status_code == 404
        assert "There is no page 99999999999999999999999" in answer.content.decode()


@pytest.mark.parametrize("selected", ["zz", "\x00", HUGE])
def test_an_action_on_a_selection_that_is_not_an_id_is_a_400(client, user, selected):
    job = make_job(user, name="still-active")
    answer = client.post(
        reverse("admin:jobs_job_changelist"),
        {"action": "pause_jobs", "_selected_action": [selected, str(job.pk)], "index": "0"},
    )
    assert answer.status_code == 400
    job.refresh_from_db()
    assert job.state == JobState.ACTIVE
    assert not JobEvent.objects.filter(job=job).exclude(action="created").exists()


def test_a_payload_stored_before_the_rules_still_shows_and_cannot_be_saved_again(client, user):
    """900 levels: past the rule, and deep enough that json.dumps, several hundred
    frames down in a template, overflows the stack."""
    job = make_job(user, name="deep")
    deep: dict = {}
    for _ in range(900):
        deep = {"a": deep}
    Job.objects.filter(pk=job.pk).update(payload=deep)  # as if stored before the rules
    change = reverse("admin:jobs_job_change", args=[job.pk])
    page = client.get(change)
    assert page.status_code == 200
    shown = page.context["adminform"].form["payload"].value()
    assert strict_json.dumps(deep) == shown
    job.refresh_from_db()
    data = admin_form(user, name="deep", payload=shown, expected_version=str(job.version))
    assert form_errors(client.post(change, data))["payload"] == [strict_json.TOO_DEEP]


@pytest.mark.parametrize(
    "name, method",
    [
        ("jobs_job_pause", "get"),
        ("jobs_job_pause", "post"),
        ("jobs_job_resume", "post"),
        ("jobs_job_rotate_secret", "get"),
        ("jobs_job_rotate_secret", "post"),
        ("jobs_job_test_delivery", "post"),
        ("runs_run_retry", "post"),
    ],
)
@pytest.mark.parametrize("object_id", ["9b2f6c1e-0000-4000-8000-000000000000", "not-an-id"])
def test_a_button_on_a_job_or_run_that_is_not_there_is_a_404(client, name, method, object_id):
    """A job's and a run's buttons (console/job_actions.py, run_actions.py)
    given an id of nothing the user may see: a 404 page, not a 500."""
    answer = getattr(client, method)(reverse(f"admin:{name}", args=[object_id]))
    assert answer.status_code == 404
