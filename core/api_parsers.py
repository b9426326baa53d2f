"""The API's only request parser: strict JSON, no 500 on any input (docs/guides/api.md
"Input rules").

DRF's stock ``JSONParser`` hands the stream to ``json.load``: it accepts
``NaN`` and ``Infinity`` (not JSON, and PostgreSQL's jsonb refuses them), lone
surrogates and NUL characters (psycopg and jsonb refuse those too, with a 500),
nesting deep enough to hit the recursion limit, and bodies of any size. Each of
those is a 400 here (the rules and their words are core/strict_json.py's, which
the admin's payload field shares), and a problem inside a JSON object names the top-level
field it was found under, in DRF's ``{"field": ["message"]}`` shape; inside a
list of objects (a bulk create), the index first: ``{"3": {"field": [...]}}``.
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.parsers import BaseParser

from core import strict_json

# A job's payload may be 64 KiB once serialized, but escapes ("\u00e9") make
# the raw body several times bigger than that; 1 MiB leaves room for both.
MAX_BODY_BYTES = 1024 * 1024


class PayloadTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = f"The request body is larger than {MAX_BODY_BYTES // 1024} KiB."
    default_code = "payload_too_large"


class StrictJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_BODY_BYTES:
            raise PayloadTooLarge()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise exceptions.ParseError("The request body is not valid UTF-8.") from None
        try:
            data = strict_json.loads(text)
        except strict_json.JSONProblem as exc:
            raise exceptions.ParseError(str(exc)) from None
        if isinstance(data, dict):
            errors = _object_problems(data)
            if errors:
                raise exceptions.ValidationError(errors)
        elif isinstance(data, list):
            # A list (a bulk create of objects): each item is judged as a body
            # of its own, and a problem is named by index, then field.
            item_errors = {}
            for index, item in enumerate(data):
                if isinstance(item, dict):
                    errors = _object_problems(item)
                else:
                    reason = strict_json.problem(item)
                    errors = {"non_field_errors": [reason]} if reason else {}
                if errors:
                    item_errors[str(index)] = errors
            if item_errors:
                raise exceptions.ValidationError(item_errors)
        else:
            reason = strict_json.problem(data)
            if reason:
                raise exceptions.ParseError(reason)
        return data


def _object_problems(data: dict) -> dict[str, list[str]]:
    """A JSON object's problems, by top-level field (its depth counted from itself)."""
    errors = {}
    for key, value in data.items():
        key_problem = strict_json.string_problem(key)
        reason = key_problem or strict_json.problem(value, depth=2)
        if reason:
            errors["non_field_errors" if key_problem else key] = [reason]
    return errors
