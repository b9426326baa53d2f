"""A job's tags: short labels to group and find jobs by (docs/guides/api.md
"Tags"). The rule is here once; the API's serializer, the admin's form and
the list filters all call :func:`clean_tags`, so the two ways in accept and
refuse the same tags in the same words.

* at most ``MAX_TAGS`` tags per job;
* each 1 to ``MAX_TAG_LENGTH`` characters of ``a-z``, ``0-9``, ``-``, ``_``,
  ``.`` and ``:``, starting with a letter or a digit (``team:billing``,
  ``env.prod``, ``nightly-2``);
* letters are lower-cased, so ``Billing`` and ``billing`` are one tag;
  surrounding spaces are trimmed, and a repeated tag is kept once, in the
  order first sent.

Pure: no ORM, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_TAGS = 10
MAX_TAG_LENGTH = 40
TAG_PATTERN = re.compile(rf"[a-z0-9][a-z0-9_.:-]{{0,{MAX_TAG_LENGTH - 1}}}")
RULE = (
    f"1 to {MAX_TAG_LENGTH} characters of a-z, 0-9, '-', '_', '.' and ':',"
    " starting with a letter or a digit"
)


class TagError(ValueError):
    """Why a list of tags was refused, in words for the owner."""


def tag_problem(tag: object) -> str | None:
    """Why ``tag`` (as sent, before lower-casing) is not a tag; None if it is one."""
    if not isinstance(tag, str):
        return f"A tag is a string, not {type(tag).__name__}."
    text = tag.strip().lower()
    if not text:
        return "A tag cannot be empty."
    if len(text) > MAX_TAG_LENGTH:
        return f"“{text[:MAX_TAG_LENGTH]}…” is longer than {MAX_TAG_LENGTH} characters."
    if not TAG_PATTERN.fullmatch(text):
        return f"“{text}” is not a tag: use {RULE}."
    return None


def clean_tags(tags: Iterable[object]) -> list[str]:
    """The tags as stored: trimmed, lower-cased, each once, in the order
    sent. Raises ``TagError`` naming the first bad tag, or saying there are
    too many."""
    cleaned: list[str] = []
    for tag in tags:
        problem = tag_problem(tag)
        if problem:
            raise TagError(problem)
        assert isinstance(tag, str)  # tag_problem refused anything else
        text = tag.strip().lower()
        if text not in cleaned:
            cleaned.append(text)
    if len(cleaned) > MAX_TAGS:
        raise TagError(f"At most {MAX_TAGS} tags per job (got {len(cleaned)}).")
    return cleaned
