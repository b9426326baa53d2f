"""Every admin URL that takes an id, given ids that are no ids, answers a
4xx, never a 500 (docs/guides/api.md "Input rules").

The URLs come from Django's resolver, not from a list kept by hand, so a new
model admin or a new button is crawled as soon as it exists: every change,
history, delete and password page, every job and run button (console/), and
the "view on site" shortcut, ``/admin/r/<content type>/<id>/``, for the
content type of every installed model. Each is asked with GET and POST, as a
job owner and as a superuser, with DEBUG off as in production; the test
client raises any exception a view lets out, so a 500 fails the test before
its status is even looked at.

Jobs, runs and events are not found (404) whatever the id: an owner's URL
never confirms that another owner's object exists. Django's own admins
(users, groups, tokens, ...) answer a missing object as Django does, with a
redirect to the index that says so, or with a 403 to a user who may not see
the model at all. The shortcut is a 404 for every content type: no model
has a page outside the admin.
"""

from __future__ import annotations

import uuid

import pytest
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from runs import job_verbs
from tests.factories import make_job

pytestmark = pytest.mark.django_db

# Ids that name nothing, in every shape a URL can carry: text, a NUL, a
# number past bigint, a negative or fractional number, a UUID of nothing.
MALFORMED = [
    "not-an-id",
    "a\x00b",
    "\x00",
    "9" * 30,
    "-1",
    "1.5",
    "0",
    str(uuid.UUID(int=0)),
    "9b2f6c1e-0000-4000-8000-00000000000",  # one digit short of a UUID
    "é",
]
# The models whose every URL is owner-scoped: a missing object is a 404.
OWNED = {"jobs_job", "runs_run", "jobs_jobevent"}
INDEX = reverse("admin:index")


def admin_patterns_with_ids() -> dict[str, set[str]]:
    """{route: its URL kwargs} for every admin pattern that takes an id."""
    found: dict[str, set[str]] = {}

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
                continue
            assert isinstance(pattern, URLPattern)
            kwargs = set(pattern.pattern.regex.groupindex) - {"app_label", "url"}
            if route.startswith("admin/") and kwargs:
                found[route] = kwargs

    walk(get_resolver().url_patterns, "")
    return found


def fill(route: str, values: dict[str, str]) -> str:
    path = "/" + route
    for name, value in values.items():
        path = path.replace(f"<path:{name}>", value).replace(f"<{name}>", value)
    assert "<" not in path, path
    return path


@pytest.fixture(autouse=True)
def _production_like(settings):
    settings.DEBUG = False


@pytest.fixture(params=["owner", "superuser"])
def client(request, ann, root) -> Client:
    client = Client()
    client.force_login({"owner": ann, "superuser": root}[request.param])
    assert client.raise_request_exception  # an exception in a view fails the test
    return client


def test_the_crawl_finds_the_shortcut_and_every_object_url():
    routes = admin_patterns_with_ids()
    assert "admin/r/<path:content_type_id>/<path:object_id>/" in routes
    names = " ".join(routes)
    for part in ("jobs/job/<path:object_id>/pause/", "runs/run/<path:object_id>/retry/"):
        assert part in names
    assert len(routes) > 50  # the stock pages of every registered model, and the buttons


def expected(route: str, method: str) -> set[int]:
    """What a URL answers, past the redirect of ``<model>/<id>/`` to its
    change page: a button that only takes a POST refuses a GET before it
    looks at the id (405)."""
    refused = {405} if method == "get" else set()
    model = "_".join(route.split("/")[1:3])
    if model in OWNED:
        return {404} | refused
    # Django's own admins: a redirect to the index, which says the object
    # does not exist, a 403 for a user who may not see the model, or a 404
    # where Django raises one (a user's password page).
    return {302, 403, 404} | refused


def ask(client: Client, method: str, path: str):
    """The answer to ``path``, past redirects to anything but the index."""
    answer = getattr(client, method)(path)
    for _ in range(3):
        if answer.status_code != 302 or answer["Location"] == INDEX:
            return answer
        answer = client.get(answer["Location"])
    raise AssertionError(f"{path}: a redirect loop")


@pytest.mark.parametrize("method", ["get", "post"])
def test_an_id_that_is_no_id_is_a_4xx_at_every_admin_url(client, method):
    answered = 0
    for route, kwargs in admin_patterns_with_ids().items():
        if "content_type_id" in kwargs:
            continue  # the shortcut has its own test
        for bad in MALFORMED:
            path = fill(route, dict.fromkeys(kwargs, bad))
            answer = ask(client, method, path)
            assert answer.status_code in expected(route, method), (path, answer.status_code)
            answered += 1
    assert answered >= 400


def content_type_ids() -> list[str]:
    return [str(pk) for pk in ContentType.objects.values_list("pk", flat=True)]


def test_the_shortcut_is_a_404_for_every_content_type_and_any_id(client, ann):
    """``/admin/r/<content type>/<id>/`` ("view on site"): an id that is no id
    of the model, a content type that is none, and a real object of a model
    that has no page outside the admin, are each not found."""
    job = make_job(ann)
    run = job_verbs.trigger(job)
    route = "admin/r/<path:content_type_id>/<path:object_id>/"
    types = content_type_ids()
    assert len(types) > 10  # every installed model, not only the registered ones
    for content_type in [*types, *MALFORMED]:
        for bad in [*MALFORMED, str(job.pk), str(run.pk)]:
            path = fill(route, {"content_type_id": content_type, "object_id": bad})
            for method in ("get", "post"):
                answer = getattr(client, method)(path)
                assert answer.status_code == 404, (path, method, answer.status_code)


def test_the_shortcut_of_a_job_and_a_run_by_name_is_a_404(client, ann):
    """The reviewer's case: the jobs' and runs' content types, a malformed id."""
    for model in ("job", "run"):
        app = "jobs" if model == "job" else "runs"
        content_type = ContentType.objects.get(app_label=app, model=model)
        for bad in ("not-a-uuid", "1", "\x00"):
            answer = client.get(reverse("admin:view_on_site", args=[content_type.pk, bad]))
            assert answer.status_code == 404
