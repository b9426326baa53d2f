"""Strict JSON: the rules every JSON value from outside must pass
(docs/guides/api.md "Input rules").

Python's ``json`` module accepts more than PostgreSQL's jsonb can store or the
rest of Punctual can handle: ``NaN`` and ``Infinity`` (not JSON; jsonb refuses
them), numbers too long to convert (a ``ValueError`` deep inside ``json``), NUL
characters and lone surrogates (psycopg and jsonb refuse them), repeated keys
(parsers disagree on which one wins) and nesting deep enough to exhaust the
stack on the way in or out. Each of those is a :class:`JSONProblem` here, with
one message per rule.

The API's body parser (core/api_parsers.py) and the job payload rule
(``jobs.limits.payload_problem``, which the admin form uses too) both read
these rules, so the admin and the API refuse the same values with the same
words. :func:`dumps` writes any decoded value back without recursion, so that a
value stored before these rules existed still shows on a page.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator

# Depth of arrays and objects, counting the outermost value itself. Generous
# for payloads, and far below anything that could exhaust the stack on the way
# out (the worker serializes a payload again at every delivery).
MAX_DEPTH = 32
# Python's own default limit for converting between integers and text
# (sys.get_int_max_str_digits): a longer integer cannot be read or written
# back without lifting it, so it is refused by name instead.
MAX_INT_DIGITS = 4300

NON_FINITE = "NaN and Infinity are not valid JSON numbers."
TOO_DEEP = f"Nested more than {MAX_DEPTH} levels deep."
TOO_LONG = f"Numbers may have at most {MAX_INT_DIGITS:,} digits."
DUPLICATE_KEY = "A key appears more than once in the same object."
NUL = "NUL characters (\\u0000) are not allowed."
SURROGATE = "Lone surrogate characters are not allowed."


class JSONProblem(ValueError):
    """A text that is not strict JSON; the message says which rule it breaks."""


class _Refused:
    """Stands in for a refused number during parsing, so that the walk in
    :func:`problem` can say under which field it was found."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


_NON_FINITE = _Refused(NON_FINITE)
_TOO_LONG = _Refused(TOO_LONG)


def _parse_float(text: str) -> float | _Refused:
    value = float(text)
    # "1e400" is valid JSON syntax but overflows to inf.
    return value if math.isfinite(value) else _NON_FINITE


def _parse_int(text: str) -> int | _Refused:
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        return _TOO_LONG
    return int(text)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj: dict[str, object] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(DUPLICATE_KEY)
        obj[key] = value
    return obj


def loads(text: str) -> object:
    """Parse ``text``; a syntax error, a repeated key or nesting too deep for
    the parser is a :class:`JSONProblem`.

    Refused numbers come back as placeholders that :func:`problem` reports,
    so call it on the result (with the depth the value sits at).
    """
    try:
        return json.loads(
            text,
            parse_float=_parse_float,
            parse_int=_parse_int,
            parse_constant=lambda _name: _NON_FINITE,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise JSONProblem(TOO_DEEP) from None
    except _DuplicateKey as exc:
        raise JSONProblem(str(exc)) from None
    except ValueError as exc:
        raise JSONProblem(f"Not valid JSON: {exc}") from None


def problem(value: object, depth: int = 1) -> str | None:
    """The first rule ``value`` breaks, or None. ``depth`` is the level
    ``value`` sits at (1 for a whole body). Iterative, so a deep value cannot
    overflow the stack here either."""
    stack: list[tuple[object, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            reason = string_problem(item)
            if reason:
                return reason
        elif isinstance(item, _Refused):
            return item.reason
        elif isinstance(item, float) and not math.isfinite(item):
            return NON_FINITE
        elif isinstance(item, dict | list):
            if level > MAX_DEPTH:
                return TOO_DEEP
            children: Iterator[object]
            if isinstance(item, dict):
                for key in item:
                    reason = string_problem(key)
                    if reason:
                        return reason
                children = iter(item.values())
            else:
                children = iter(item)
            stack.extend((child, level + 1) for child in children)
    return None


def string_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored in PostgreSQL, or None."""
    if "\x00" in text:
        return NUL
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # json.loads joins valid surrogate pairs, so anything left is a lone half.
        return SURROGATE
    return None


def dumps(value: object) -> str:
    """``value`` as compact JSON text, at any depth.

    ``json.dumps`` recurses once per level, and a page renders several hundred
    frames down: a payload stored before the depth rule could not be shown.
    The standard encoder writes each scalar; the nesting is walked with a stack.
    """
    out: list[str] = []
    # Each entry is either text to write or a value still to encode.
    stack: list[tuple[bool, object]] = [(False, value)]
    while stack:
        is_text, item = stack.pop()
        if is_text:
            out.append(str(item))
        elif isinstance(item, dict):
            parts: list[tuple[bool, object]] = [(True, "{")]
            for index, (key, child) in enumerate(item.items()):
                separator = ", " if index else ""
                parts += [(True, separator + _scalar(str(key)) + ": "), (False, child)]
            parts.append((True, "}"))
            stack.extend(reversed(parts))
        elif isinstance(item, list):
            parts = [(True, "[")]
            for index, child in enumerate(item):
                parts += [(True, ", " if index else ""), (False, child)]
            parts.append((True, "]"))
            stack.extend(reversed(parts))
        else:
            out.append(_scalar(item))
    return "".join(out)


def _scalar(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


# How much deeper than Python's recursion limit ``loads_stored`` reads: far
# more than any payload stored before the depth rule (the admin then read
# payloads with plain json.loads, which stops near 1,000 levels), and little
# enough for the C stack of any thread.
STORED_EXTRA_DEPTH = 5_000


def loads_stored(text: str) -> object:
    """A JSON text read back from the database, at any depth it was stored in.

    Values stored since the depth rule are shallow, and read by plain
    ``json.loads``. One stored before it may be nested deeper than Python's
    recursion limit leaves room for, from whatever stack depth the caller
    reads it at: it is read again with the limit raised for the call, so that
    its job's pages still open (and show it, through ``dumps``).
    """
    try:
        return json.loads(text)
    except RecursionError:
        pass
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + STORED_EXTRA_DEPTH)
    try:
        return json.loads(text)
    finally:
        sys.setrecursionlimit(limit)
