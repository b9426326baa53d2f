"""The OpenAPI document speaks to API users: an introduction that says how to
authenticate, descriptions free of the maintainers' notes (docstrings about
SQL, locks and modules), and response examples for the pull-worker protocol."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

# Words of the code's docstrings and comments that an API user has no use for.
INTERNAL = (
    ".py",
    "``",
    "SQL",
    "row lock",
    "FOR UPDATE",
    "SKIP LOCKED",
    ".md",
    "queryset",
    "serializer",
    "docstring",
    "context[",
)


@pytest.fixture
def schema(anon) -> dict:
    answer = anon.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert answer.status_code == 200
    return answer.json()


def texts(node, where="") -> list[tuple[str, str]]:
    """Every description and summary in the document, with where it is."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("description", "summary") and isinstance(value, str):
                found.append((f"{where}/{key}", value))
            else:
                found.extend(texts(value, f"{where}/{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(texts(value, f"{where}[{index}]"))
    return found


def test_no_description_leaks_the_maintainers_notes(schema):
    found = texts(schema)
    assert len(found) > 100  # the walk reaches the operations and the components
    leaks = [(where, text) for where, text in found for word in INTERNAL if word in text]
    assert leaks == []


def test_the_introduction_says_how_to_authenticate(schema):
    intro = schema["info"]["description"]
    assert "Authorization: Token <key>" in intro
    assert "Bearer <key>" in intro
    assert "page_size" in intro


def example(schema, path: str):
    response = schema["paths"][path]["post"]["responses"]["200"]
    [only] = response["content"]["application/json"]["examples"].values()
    return only["value"]


def test_the_pull_worker_calls_have_response_examples(schema):
    [claimed] = example(schema, "/api/v1/runs/claim/")
    assert {"id", "attempt", "lease_until", "payload"} <= set(claimed)
    assert set(example(schema, "/api/v1/runs/{id}/heartbeat/")) == {"lease_until"}
    done = example(schema, "/api/v1/runs/{id}/complete/")
    assert (done["id"], done["state"], done["last_error"]) == (claimed["id"], "succeeded", "")
    assert done["last_response"] == done["attempts"][0]["response"] != ""
    for path in ("claim/", "{id}/heartbeat/", "{id}/complete/"):
        assert schema["paths"][f"/api/v1/runs/{path}"]["post"]["description"]
