"""Schemathesis against /api/v1/schema/: generated requests, both well-formed and
malformed, to every operation, with an owner's token. No answer may be a 5xx,
and every answer must match the schema (status, content type, body, headers).

Bounded (MAX_EXAMPLES per operation and phase) so it stays well under a minute.
Path ids are pointed at the owner's real objects, so the generated bodies reach
validation and the verbs instead of stopping at a 404.
"""

from __future__ import annotations

import json

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from runs import job_verbs, leases
from runs.models import Run
from scheduler_site.wsgi import application
from tests.factories import make_job
from tests.integration.api.support import api_key

MAX_EXAMPLES = 12
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    ignored_auth,
]

# Hypothesis' caches go under var/ (ignored), not into a .hypothesis/ in the checkout.
set_hypothesis_home_dir(django_settings.BASE_DIR / "var" / "hypothesis")


def _served_schema() -> dict:
    """The document /api/v1/schema/ serves, made in-process: fetching it through
    the app at collection time would count against the rate limit, whose
    counters are in the database, which pytest-django does not open yet."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(document))


schema = schemathesis.openapi.from_dict(_served_schema())
schema.app = application
schema.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE],
    max_examples=MAX_EXAMPLES,
    deterministic=True,
    database="none",
)


@pytest.fixture
def _one_connection():
    """Schemathesis calls the WSGI app directly, and Django's request signals
    would close the test's database connection (and its transaction) after
    every request. Django's own test client unhooks them the same way."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def world(db, owner, settings):
    """An owner with a token, a webhook job, and a pull job whose run is held."""
    # A waiting claim polls (api/claim_waits.py) rather than start a LISTEN
    # connection that would outlive the test's database.
    settings.PUNCTUAL_LISTEN = False
    job = make_job(owner, url="https://93.184.215.14/hook")
    pull = make_job(owner, target_kind="pull", url="")
    held = job_verbs.trigger(pull)
    leases.claim(
        f"pull:{owner.pk}:w", limit=1, lease_seconds=600, target_kind="pull", job_owner_id=owner.pk
    )
    failed = job_verbs.trigger(job)
    Run.objects.filter(pk=failed.pk).update(state="failed")
    token = api_key(owner)
    return {"token": token, "job": str(job.pk), "run": str(held.pk), "failed": str(failed.pk)}


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_api_answers_conform_to_the_schema(case, world, _one_connection, unlimited):
    # No rate limits: schemathesis sends each unauthenticated probe many times,
    # and the limits have their own tests (test_api_rate_limits.py).
    # A random If-Match is a 412 before anything else is looked at: let most
    # writes through to validation (the 412 path has its own tests).
    if case.headers and "If-Match" in case.headers and case.method != "DELETE":
        del case.headers["If-Match"]
    # A valid wait holds a claim that long when nothing is claimable: a
    # second walks the same path.
    if case.path == "/api/v1/runs/claim/" and isinstance(case.body, dict):
        wait = case.body.get("wait_seconds")
        if type(wait) is int and 1 < wait <= 30:
            case.body["wait_seconds"] = 1
    if "id" in (case.path_parameters or {}):
        if case.path.startswith("/api/v1/jobs/"):
            case.path_parameters["id"] = world["job"]
        elif case.path.endswith("/retry/"):
            case.path_parameters["id"] = world["failed"]
        else:
            case.path_parameters["id"] = world["run"]
    case.call_and_validate(headers={"Authorization": f"Token {world['token']}"}, checks=CHECKS)
