"""The authorization matrix (docs/security.md "Tokens and access"): every API
route that takes an object id, every method, three callers.

The routes come from Django's resolver, not from a list kept by hand: a new
route with an id that is not in MATRIX fails the first test. For each route and
method, owner B gets the same 404 for owner A's object as for an id that does
not exist, and A's rows are unchanged afterwards; anonymous callers get 401;
and A, for contrast, succeeds. List endpoints never show another owner's rows.
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from alerts.models import Alert
from alerts.models import Channel as AlertChannel
from jobs import crypto
from jobs.models import IdempotencyKey, Job, JobEvent
from runs import job_verbs, leases
from runs.models import Attempt, Run
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL

pytestmark = pytest.mark.django_db

WINDOW = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}
# An apprise URL on a public address (the save-time check resolves nothing).
PUBLIC_CHANNEL = "json://93.184.216.34:8080/hooks/alerts"

# route name -> {method: body}. Routes named job-* take a job id, run-* a run
# id, alert-channel-* an alert channel's.
MATRIX: dict[str, dict[str, dict | None]] = {
    "job-detail": {
        "get": None,
        "put": {"name": "taken over", "interval_seconds": 600, "url": PUBLIC_URL},
        "patch": {"description": "taken over"},
        "delete": None,
    },
    "job-pause": {"post": {"note": "taken over"}},
    "job-resume": {"post": {"catch_up": True}},
    "job-trigger": {"post": None},
    "job-test": {"post": None},
    "job-rotate-secret": {"post": None},
    "job-backfill": {"post": WINDOW},
    "job-preview": {"get": None},
    "job-events": {"get": None},
    "job-runs": {"get": None},
    "run-detail": {"get": None},
    "run-retry": {"post": None},
    "run-heartbeat": {"post": {"attempt": 1}},
    "run-complete": {"post": {"attempt": 1, "status": "succeeded"}},
    "alert-channel-detail": {
        "get": None,
        "put": {"name": "taken over", "url": PUBLIC_CHANNEL},
        "patch": {"name": "taken over"},
        "delete": None,
    },
    "alert-channel-test": {"post": None},
}
CASES = [(name, method) for name, methods in MATRIX.items() for method in methods]


def api_routes_with_ids() -> dict[str, set[str]]:
    """{route name: HTTP methods} for every pattern under /api/v1/ with a URL kwarg."""
    found: dict[str, set[str]] = {}

    def walk(patterns, prefix: str, kwargs: set[str]) -> None:
        for pattern in patterns:
            names = kwargs | set(pattern.pattern.regex.groupindex)
            names |= set(getattr(pattern.pattern, "converters", {}))
            route = prefix + str(pattern.pattern).lstrip("^")
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route, names)
            elif isinstance(pattern, URLPattern) and route.startswith("api/v1/") and names:
                found[pattern.name or route] = _methods(pattern)

    walk(get_resolver().url_patterns, "", set())
    return found


def _methods(pattern: URLPattern) -> set[str]:
    actions = getattr(pattern.callback, "actions", None)
    if actions is not None:
        return set(actions) - {"head", "options"}
    view = pattern.callback.cls if hasattr(pattern.callback, "cls") else pattern.callback.view_class
    return {m for m in view.http_method_names if hasattr(view, m)} - {"head", "options"}


def test_every_api_route_with_an_object_id_is_in_the_matrix():
    routes = api_routes_with_ids()
    assert routes, "the resolver walk found no routes: it is broken"
    missing = {name: sorted(methods) for name, methods in routes.items() if name not in MATRIX}
    assert not missing, f"add these routes to MATRIX: {missing}"
    for name, methods in routes.items():
        assert methods == set(MATRIX[name]), f"{name}: methods {methods} vs matrix"
    assert set(MATRIX) == set(routes), "MATRIX lists routes that no longer exist"


@pytest.fixture
def owned(owner):
    """Owner A's objects: a pull job whose run is held by A's worker (so
    heartbeat and complete would work for A), a failed run to retry, and an
    alert channel."""
    job = make_job(owner, name="a's job", target_kind="pull", url="")
    held = job_verbs.trigger(job)
    [claimed] = leases.claim(
        f"pull:{owner.pk}:w1", limit=1, lease_seconds=600, target_kind="pull", job_owner_id=owner.pk
    )
    assert claimed.run_id == held.pk
    failed = job_verbs.trigger(make_job(owner, name="a's other job"))
    Run.objects.filter(pk=failed.pk).update(state="failed")
    channel = AlertChannel.objects.create(
        owner=owner, name="a's channel", url_encrypted=crypto.encrypt(PUBLIC_CHANNEL), masked="-"
    )
    return {"job": job, "held": held, "failed": failed, "channel": channel}


def object_url(name: str, owned: dict, *, pk=None) -> str:
    if name.startswith("alert-channel-"):
        kind, action = "alert-channel", name.removeprefix("alert-channel-")
    else:
        kind, _, action = name.partition("-")
    if pk is None:
        if kind == "alert-channel":
            pk = owned["channel"].pk
        elif kind == "job":
            pk = owned["job"].pk
        else:
            pk = owned["failed" if action == "retry" else "held"].pk
    suffix = "" if action == "detail" else f"{action}/"
    return f"/api/v1/{kind}s/{pk}/{suffix}"


def snapshot() -> tuple:
    """Every row an API call could touch, as plain values."""
    return (
        list(Job.objects.order_by("id").values()),
        list(Run.objects.order_by("id").values()),
        list(Attempt.objects.order_by("id").values()),
        list(JobEvent.objects.order_by("id").values()),
        IdempotencyKey.objects.count(),
        list(AlertChannel.objects.order_by("id").values()),
        list(Alert.objects.order_by("id").values()),
    )


def call(client, method: str, url: str, body):
    data = json.dumps(body) if body is not None else ""
    return client.generic(
        method.upper(),
        url,
        data,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="matrix",
    )


@pytest.mark.parametrize("name,method", CASES, ids=[f"{m.upper()} {n}" for n, m in CASES])
def test_another_owner_gets_the_same_404_and_changes_nothing(api, other_api, owned, name, method):
    body = MATRIX[name][method]
    before = snapshot()
    theirs = call(other_api, method, object_url(name, owned), body)
    nowhere = call(other_api, method, object_url(name, owned, pk=uuid.uuid4()), body)
    malformed = call(other_api, method, object_url(name, owned, pk="not-an-id"), body)
    assert theirs.status_code == 404, theirs.content
    assert theirs.json() == nowhere.json() == malformed.json()
    assert nowhere.status_code == malformed.status_code == 404
    assert snapshot() == before

    # For contrast, the owner's own call works: the 404 above was the owner check.
    mine = call(api, method, object_url(name, owned), body)
    assert mine.status_code < 300, mine.content


@pytest.mark.parametrize("name,method", CASES, ids=[f"{m.upper()} {n}" for n, m in CASES])
def test_anonymous_callers_get_401_and_change_nothing(anon, owned, name, method):
    before = snapshot()
    answer = call(anon, method, object_url(name, owned), MATRIX[name][method])
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"] == "Token"
    assert "detail" in answer.json()
    assert snapshot() == before


@pytest.mark.parametrize("name", [n for n in MATRIX if "get" in MATRIX[n]])
def test_head_and_options_tell_nothing_either(other_api, owned, name):
    url = object_url(name, owned)
    assert other_api.head(url).status_code == 404
    # OPTIONS is off: it would describe any id alike, but there is nothing to gain.
    assert (
        other_api.options(url).status_code
        == other_api.options(object_url(name, owned, pk=uuid.uuid4())).status_code
    )


LISTS = ["/api/v1/jobs/", "/api/v1/runs/"]


def test_lists_never_show_another_owner_s_rows(api, other_api, owned, other_owner):
    theirs = make_job(other_owner, name="b's job")
    theirs_run = job_verbs.trigger(theirs)
    a_job = str(owned["job"].pk)
    for url in LISTS:
        rows = other_api.get(url).json()["results"]
        assert {r["id"] for r in rows} <= {str(theirs.pk), str(theirs_run.pk)}
        assert rows, url
    assert other_api.get("/api/v1/runs/", {"job": a_job}).json()["results"] == []
    assert [r["id"] for r in api.get("/api/v1/runs/", {"job": a_job}).json()["results"]] == [
        str(owned["held"].pk)
    ]
    theirs_channel = AlertChannel.objects.create(
        owner=other_owner, name="b's channel", url_encrypted=crypto.encrypt(PUBLIC_CHANNEL)
    )
    assert [c["id"] for c in other_api.get("/api/v1/alert-channels/").json()] == [theirs_channel.pk]
    job_verbs.trigger(owned["job"])
    claimed = other_api.post("/api/v1/runs/claim/", {"worker": "w1", "limit": 100}, format="json")
    assert claimed.status_code == 200 and claimed.json() == []


def test_anonymous_lists_and_actions_are_401(anon):
    for method, url in (
        ("get", "/api/v1/jobs/"),
        ("post", "/api/v1/jobs/"),
        ("get", "/api/v1/runs/"),
        ("get", "/api/v1/alert-channels/"),
        ("post", "/api/v1/alert-channels/"),
        ("post", "/api/v1/runs/claim/"),
        ("post", "/api/v1/schedules/preview/"),
    ):
        assert call(anon, method, url, {}).status_code == 401


def test_superusers_see_and_change_every_owner_s_objects(admin_api, owned):
    job = owned["job"]
    assert admin_api.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    assert str(owned["held"].pk) in {
        r["id"] for r in admin_api.get("/api/v1/runs/").json()["results"]
    }
    answer = admin_api.patch(f"/api/v1/jobs/{job.pk}/", {"description": "root"}, format="json")
    assert answer.status_code == 200 and answer.json()["owner"] == "alice"
