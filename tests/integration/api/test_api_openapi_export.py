"""The docs site's API reference is the live API: docs/reference/openapi.yaml is
the document the code makes now, as ``manage.py spectacular`` exports it and as
/api/v1/schema/ serves it, and docs/reference/api.md is what
tools/openapi_markdown.py renders from it. A stale file fails here, naming the
make target that regenerates both, as ``makemigrations --check`` does for
migrations."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from tools import openapi_markdown

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "docs" / "reference" / "openapi.yaml"
PAGE = ROOT / "docs" / "reference" / "api.md"
STALE = "is stale: run `make openapi` and commit docs/reference/openapi.yaml and api.md"


def test_the_checked_in_schema_is_the_one_the_code_exports(tmp_path):
    exported = tmp_path / "openapi.yaml"
    call_command("spectacular", "--file", str(exported))
    assert exported.read_text() == SCHEMA.read_text(), f"docs/reference/openapi.yaml {STALE}"


@pytest.mark.django_db
def test_the_checked_in_schema_is_the_one_the_api_serves(anon):
    answer = anon.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert answer.status_code == 200
    assert answer.json() == yaml.safe_load(SCHEMA.read_text()), (
        f"docs/reference/openapi.yaml {STALE}"
    )


def test_the_reference_page_is_rendered_from_the_checked_in_schema():
    rendered = openapi_markdown.render(yaml.safe_load(SCHEMA.read_text()))
    assert rendered == PAGE.read_text(), f"docs/reference/api.md {STALE}"


def test_the_reference_page_names_every_operation_and_schema():
    document = yaml.safe_load(SCHEMA.read_text())
    page = PAGE.read_text()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert f"### {method.upper()} {path} {{#{operation['operationId']}}}" in page
    for name in document["components"]["schemas"]:
        assert f"### {name} {{#schema-{name.lower()}}}" in page
