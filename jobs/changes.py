"""What an audit event (``JobEvent.changes``) records about a job's fields
(docs/guides/api.md "Audit events").

An edit records only the fields it changed, as ``{field: [old, new]}``; a
create records the values the job started with, as ``{field: value}``. The
values are stored as JSON, with two exceptions that keep the log small and
free of what must not be copied:

* the payload (up to 64 KiB, and edited as often as an owner likes) appears
  as its size and hash, ``{"bytes": 1234, "sha256": "..."}``, never whole:
  enough to see that it changed, and to check a copy against it;
* a secret never appears, not even encrypted: its fields are left out. The
  credentials and the extra headers' values (jobs/http_options.py) are
  secrets too: an event says only that they were set, changed or removed
  (``auth_credentials``, ``header_values``); the header names are shown.

Every event of a job goes through ``record`` (the model's ``record_event``)
or ``Job.create_many``, and every caller builds its ``changes`` with the
functions below, so this is the one place that decides what is kept.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from jobs.limits import payload_bytes

# Stored as a size and a hash, never whole.
DIGESTED_FIELDS = frozenset({"payload"})
# Never stored at all.
SECRET_FIELDS = frozenset(
    {
        "secret",
        "secret_encrypted",
        "previous_secret_encrypted",
        "auth_encrypted",
        "headers_encrypted",
        "headers",
        "auth_token",
        "auth_username",
        "auth_password",
    }
)
# Secrets an event mentions by what happened to them, never by value.
MASKED_FIELDS = {"auth_encrypted": "auth_credentials", "headers_encrypted": "header_values"}


def digest(value: Any) -> dict[str, Any]:
    """A JSON value's size and SHA-256, over the bytes it is delivered as."""
    data = payload_bytes(value)
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def shown(name: str, value: Any) -> Any:
    """How field ``name``'s ``value`` appears in an event: JSON, UTC times
    with a "Z", a related object by its key, the payload as its digest."""
    if name in DIGESTED_FIELDS:
        return digest(value)
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, uuid.UUID):
        return str(value)
    if hasattr(value, "pk"):  # a related object (the admin's owner field)
        return str(value.pk)
    return value


def diff(changed: Mapping[str, tuple[Any, Any]]) -> dict[str, list[Any]]:
    """``{field: [old, new]}`` for each field whose value really changed."""
    out: dict[str, Any] = {
        name: [shown(name, old), shown(name, new)]
        for name, (old, new) in changed.items()
        if name not in SECRET_FIELDS and old != new
    }
    for name, label in MASKED_FIELDS.items():
        if name in changed and changed[name][0] != changed[name][1]:
            old, new = changed[name]
            out[label] = "removed" if not new else "set" if not old else "changed"
    return out


def initial(values: Mapping[str, Any]) -> dict[str, Any]:
    """``{field: value}``: what a new job started with."""
    out = {name: shown(name, value) for name, value in values.items() if name not in SECRET_FIELDS}
    for name, label in MASKED_FIELDS.items():
        if values.get(name):
            out[label] = "set"
    return out


def snapshot(job: Any, names: Iterable[str]) -> dict[str, Any]:
    """The values of ``names`` on ``job`` now, to diff against after a verb."""
    return {name: getattr(job, name) for name in names}


def since(before: Mapping[str, Any], job: Any) -> dict[str, list[Any]]:
    """``diff`` between a ``snapshot`` and what ``job`` holds now."""
    return diff({name: (old, getattr(job, name)) for name, old in before.items()})


def summary(changes: Mapping[str, Any], fields: Collection[str]) -> str:
    """One line for the admin: the ``lines`` joined by "; "."""
    return "; ".join(lines(changes, fields))


def lines(changes: Mapping[str, Any], fields: Collection[str]) -> list[str]:
    """One text per entry, by name: "field: old → new" for a change of one
    of the job's ``fields``, "name: value" for anything else (a created
    job's values, a count of runs)."""
    parts = []
    for name, value in sorted(changes.items()):
        if name in fields and isinstance(value, list) and len(value) == 2:
            parts.append(f"{name}: {_text(value[0])} → {_text(value[1])}")
        else:
            parts.append(f"{name}: {_text(value)}")
    return parts


# A time as ``shown`` stores it: "2026-12-02T00:21:32.592581Z".
_STORED_TIME = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d+)?Z")


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str) and (time := _STORED_TIME.fullmatch(value)):
        return f"{time[1]} {time[2]} UTC"  # to the second, as the admin shows times
    if isinstance(value, dict) and set(value) == {"bytes", "sha256"}:
        return f"{value['bytes']:,} bytes, sha256 {value['sha256'][:12]}…"
    if isinstance(value, str):
        return repr(value) if value == "" or value != value.strip() else value
    return str(value)
