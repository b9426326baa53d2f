"""The API's only request parser: strict JSON (README "What it guarantees", "no 500 on any input").

DRF's stock ``JSONParser`` hands the stream to ``json.load``: it accepts
``NaN`` and ``Infinity`` (not JSON, and PostgreSQL's jsonb refuses them), lone
surrogates and NUL characters (psycopg and jsonb refuse those too, with a 500),
nesting deep enough to hit the recursion limit, and bodies of any size. Each of
those is a 400 here, and a problem inside a JSON object names the top-level
field it was found under, in DRF's ``{"field": ["message"]}`` shape; inside a
list of objects (a bulk create), the index first: ``{"3": {"field": [...]}}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

from rest_framework import exceptions
from rest_framework.parsers import BaseParser

# A job's payload may be 64 KiB once serialized, but escapes ("\u00e9") make
# the raw body several times bigger than that; 1 MiB leaves room for both.
MAX_BODY_BYTES = 1024 * 1024
# Depth of arrays and objects, counting the body itself. Generous for payloads,
# and far below anything that could exhaust the stack on the way out (the
# worker serializes the payload again at every delivery).
MAX_DEPTH = 32


class PayloadTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = f"The request body is larger than {MAX_BODY_BYTES // 1024} KiB."
    default_code = "payload_too_large"


class _NonFinite:
    """Stands in for NaN/Infinity during parsing, so the walk can say where it was."""


_NON_FINITE = _NonFinite()


def _parse_float(text: str) -> float | _NonFinite:
    value = float(text)
    # "1e400" is valid JSON syntax but overflows to inf.
    return value if math.isfinite(value) else _NON_FINITE


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """Refuse {"a": 1, "a": 2}: parsers disagree on which one wins."""
    obj: dict[str, object] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey("A key appears more than once in the same object.")
        obj[key] = value
    return obj


def _problem(value: object, depth: int) -> str | None:
    """The first reason ``value`` cannot be accepted, or None. Iterative, so a
    deep value cannot overflow the stack here either."""
    stack: list[tuple[object, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            reason = _string_problem(item)
            if reason:
                return reason
        elif item is _NON_FINITE:
            return "NaN and Infinity are not valid JSON numbers."
        elif isinstance(item, dict | list):
            if level > MAX_DEPTH:
                return f"Nested more than {MAX_DEPTH} levels deep."
            children: Iterator[object]
            if isinstance(item, dict):
                for key in item:
                    reason = _string_problem(key)
                    if reason:
                        return reason
                children = iter(item.values())
            else:
                children = iter(item)
            stack.extend((child, level + 1) for child in children)
    return None


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "NUL characters (\\u0000) are not allowed."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # json.loads joins valid surrogate pairs, so anything left is a lone half.
        return "Lone surrogate characters are not allowed."
    return None


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
            data = json.loads(
                text,
                parse_float=_parse_float,
                parse_constant=lambda _name: _NON_FINITE,
                object_pairs_hook=_unique_keys,
            )
        except RecursionError:
            raise exceptions.ParseError(f"Nested more than {MAX_DEPTH} levels deep.") from None
        except _DuplicateKey as exc:
            raise exceptions.ParseError(str(exc)) from None
        except ValueError as exc:
            # JSONDecodeError, and ints past Python's 4,300-digit conversion limit.
            raise exceptions.ParseError(f"The request body is not valid JSON: {exc}") from None
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
                    reason = _problem(item, 1)
                    errors = {"non_field_errors": [reason]} if reason else {}
                if errors:
                    item_errors[str(index)] = errors
            if item_errors:
                raise exceptions.ValidationError(item_errors)
        else:
            reason = _problem(data, 1)
            if reason:
                raise exceptions.ParseError(reason)
        return data


def _object_problems(data: dict) -> dict[str, list[str]]:
    """A JSON object's problems, by top-level field (its depth counted from itself)."""
    errors = {}
    for key, value in data.items():
        reason = _string_problem(key) or _problem(value, 2)
        if reason:
            errors[key if not _string_problem(key) else "non_field_errors"] = [reason]
    return errors
