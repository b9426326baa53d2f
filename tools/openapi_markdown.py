"""Render the API's OpenAPI document as the docs site's API reference page.

    python tools/openapi_markdown.py docs/reference/openapi.yaml docs/reference/api.md

``make openapi`` exports the live document (``manage.py spectacular``) to
docs/reference/openapi.yaml, then runs this script, so the page is never
edited by hand; tests/integration/api/test_api_openapi_export.py fails when
either file differs from what the code makes. The page shows what a reader
of the reference looks for: each operation's summary, description,
parameters, request body, examples and answers, grouped by tag, then every
schema's fields with their types and limits. The YAML document stays the
whole truth; this is a view of it. Standard library and PyYAML only (a
dependency of drf-spectacular).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

METHODS = ("get", "post", "put", "patch", "delete")
ERROR_ANCHOR = "errors"


def anchor(schema_name: str) -> str:
    return f"schema-{schema_name.lower()}"


def plain(text: str) -> str:
    """Plain text as Markdown: a ``<`` outside a code span would open an HTML tag."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def cell(text: str) -> str:
    """One table cell: a single line of plain text, its pipes escaped."""
    return plain(" ".join(text.split())).replace("|", "\\|")


def ref_link(ref: str) -> str:
    name = ref.rsplit("/", 1)[-1]
    return f"[{name}](#{anchor(name)})"


def limits(schema: dict[str, Any]) -> list[str]:
    """The constraints of a value, in words."""
    found = []
    for key, word in (("minLength", "min length"), ("maxLength", "max length")):
        if key in schema:
            found.append(f"{word} {schema[key]}")
    for key, word in (("minimum", "min"), ("maximum", "max")):
        if key in schema:
            found.append(f"{word} {schema[key]}")
    for key, word in (("minItems", "min items"), ("maxItems", "max items")):
        if key in schema:
            found.append(f"{word} {schema[key]}")
    if "pattern" in schema:
        found.append(f"pattern `{schema['pattern']}`")
    if "default" in schema:
        found.append(f"default `{json.dumps(schema['default'])}`")
    return found


def type_of(schema: dict[str, Any]) -> str:
    """A schema's type in a few words, with links to named schemas."""
    if "$ref" in schema:
        text = ref_link(schema["$ref"])
    elif "allOf" in schema and len(schema["allOf"]) == 1:
        text = type_of(schema["allOf"][0])
    elif "oneOf" in schema:
        text = " or ".join(type_of(option) for option in schema["oneOf"])
    elif schema.get("type") == "array":
        text = f"array of {type_of(schema.get('items', {}))}"
    elif "enum" in schema:
        text = " or ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    else:
        text = schema.get("type", "any")
        if "format" in schema:
            text += f" ({schema['format']})"
    if schema.get("nullable"):
        text += ", nullable"
    return text


def error_description(document: dict[str, Any]) -> str:
    """The description of the error body that every operation shares."""
    for operations in document["paths"].values():
        for operation in operations.values():
            for status, answer in operation["responses"].items():
                if status.startswith("4"):
                    schema = answer.get("content", {}).get("application/json", {}).get("schema")
                    if schema and "$ref" not in schema and "description" in schema:
                        return str(schema["description"])
    return ""


def body_of(content: dict[str, Any], shared_error: str) -> str:
    """What a request or an answer carries: its schema's type."""
    media = content.get("application/json")
    if media is None:
        return ", ".join(f"`{kind}`" for kind in content) or "none"
    schema = media.get("schema", {})
    if "$ref" not in schema and schema.get("description") == shared_error:
        return f"[error](#{ERROR_ANCHOR})"
    text = type_of(schema)
    if "$ref" not in schema and schema.get("type") != "array" and schema.get("description"):
        text += f": {schema['description']}"
    return text


def examples_of(content: dict[str, Any], what: str) -> list[str]:
    lines = []
    for name, example in content.get("application/json", {}).get("examples", {}).items():
        title = example.get("summary", name)
        lines += [
            f"*{what} example: {title}*",
            "",
            "```json",
            json.dumps(example["value"], indent=2, ensure_ascii=False),
            "```",
            "",
        ]
    return lines


def operation_lines(
    path: str, method: str, operation: dict[str, Any], shared_error: str
) -> list[str]:
    lines = [
        f"### {method.upper()} {path} {{#{operation['operationId']}}}",
        "",
        f"**{operation.get('summary', '')}**",
        "",
    ]
    if operation.get("description"):
        lines += [plain(operation["description"]), ""]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += [
            "| parameter | in | type | required | description |",
            "|---|---|---|---|---|",
        ]
        for parameter in parameters:
            schema = parameter.get("schema", {})
            kind = ", ".join([type_of(schema), *limits(schema)])
            required = "yes" if parameter.get("required") else "no"
            lines.append(
                f"| `{parameter['name']}` | {parameter['in']} | {cell(kind)} | {required} "
                f"| {cell(parameter.get('description', ''))} |"
            )
        lines.append("")
    request = operation.get("requestBody")
    if request:
        required = " (required)" if request.get("required") else ""
        body = body_of(request["content"], shared_error)
        schema = request["content"].get("application/json", {}).get("schema", {})
        for option in schema.get("oneOf", []):
            if option.get("type") == "array":
                body += f"; the list: {', '.join(limits(option))}. {option.get('description', '')}"
        lines += [f"Request body{required}: {cell(body)}", ""]
        lines += examples_of(request["content"], "Request")
    lines += ["| answer | body | description |", "|---|---|---|"]
    for status, answer in sorted(operation["responses"].items()):
        body = body_of(answer.get("content", {}), shared_error)
        description = answer.get("description", "")
        for header, spec in answer.get("headers", {}).items():
            description += f" Header `{header}`: {spec.get('description', '')}"
        lines.append(f"| {status} | {cell(body)} | {cell(description)} |")
    lines.append("")
    for status, answer in sorted(operation["responses"].items()):
        lines += examples_of(answer.get("content", {}), f"Answer {status}")
    security = [name for option in operation.get("security", []) for name in option]
    if security:
        lines += [f"Authentication: {', '.join(f'`{name}`' for name in security)}.", ""]
    else:
        lines += ["Authentication: none.", ""]
    return lines


def schema_lines(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{#{anchor(name)}}}", ""]
    if schema.get("description"):
        lines += [plain(schema["description"]), ""]
    properties = schema.get("properties")
    if properties:
        required = set(schema.get("required", []))
        lines += ["| field | type | description |", "|---|---|---|"]
        for field, spec in properties.items():
            notes = []
            if field in required:
                notes.append("required")
            if spec.get("readOnly"):
                notes.append("read-only")
            if spec.get("writeOnly"):
                notes.append("write-only")
            kind = ", ".join([type_of(spec), *notes, *limits(spec)])
            lines.append(f"| `{field}` | {cell(kind)} | {cell(spec.get('description', ''))} |")
        lines.append("")
    elif "enum" not in schema:
        lines += [f"Type: {type_of(schema)}.", ""]
    elif not schema.get("description"):
        lines += [f"One of {type_of(schema)}.", ""]
    return lines


def render(document: dict[str, Any]) -> str:
    info = document["info"]
    shared_error = error_description(document)
    lines = [
        "# API reference",
        "",
        "<!-- Generated by tools/openapi_markdown.py from docs/reference/openapi.yaml"
        " (make openapi). Do not edit. -->",
        "",
        f"*{info['title']}, version {info['version']}, OpenAPI {document['openapi']}.* "
        "This page is generated from the API's OpenAPI document, "
        "[openapi.yaml](openapi.yaml), which `make openapi` exports from the code. "
        "A running Punctual serves the same document at `/api/v1/schema/` and a "
        "Swagger UI at `/api/v1/docs/`. The rules every endpoint shares (input, "
        "versions, idempotency, lists, rate limits) are in "
        "[Using the API](../guides/api.md).",
        "",
        info.get("description", "").strip(),
        "",
        "## Authentication",
        "",
    ]
    for name, scheme in document["components"].get("securitySchemes", {}).items():
        where = f"{scheme.get('in', '')} `{scheme.get('name', '')}`"
        about = cell(scheme.get("description", ""))
        lines.append(f"- `{name}`: {scheme['type']} in the {where}. {about}".rstrip())
    lines += [
        "",
        f"## Errors {{#{ERROR_ANCHOR}}}",
        "",
        f"Every error answer has this body: {cell(shared_error)}",
        "",
        "## Operations",
        "",
        "| operation | summary |",
        "|---|---|",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in document["paths"].items():
        for method in METHODS:
            if method in operations:
                operation = operations[method]
                tag = operation.get("tags", ["other"])[0]
                by_tag.setdefault(tag, []).append((path, method, operation))
                lines.append(
                    f"| [{method.upper()} {path}](#{operation['operationId']}) "
                    f"| {cell(operation.get('summary', ''))} |"
                )
    lines.append("")
    for tag, operations in by_tag.items():
        lines += [f"## {tag.capitalize()} {{#tag-{tag}}}", ""]
        for path, method, operation in operations:
            lines += operation_lines(path, method, operation, shared_error)
    lines += ["## Schemas", ""]
    for name, schema in document["components"]["schemas"].items():
        lines += schema_lines(name, schema)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    document = yaml.safe_load(Path(argv[1]).read_text())
    Path(argv[2]).write_text(render(document))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
