"""How a webhook job calls its endpoint: method, body, extra headers and
authentication (docs/guides/api.md "Calling any HTTP endpoint").

The API's serializer and the admin's form both call ``settle``, so the two
faces accept and refuse the same values in the same words, naming the same
fields. Header values and credentials are secrets: they are stored only as
Fernet tokens (jobs/crypto.py), never shown again, never put in an event or
the export. A header's name is not a secret, and is kept in the clear
(``Job.header_names``) to be shown.

Decisions (each one in the docs):

* GET sends no body: a GET job's body mode must be ``none``. When a request
  sets the method and not the body mode, the body mode follows the method
  (``natural_body``). DELETE may carry a body, but gets none by default.
* The headers Punctual sets itself, or that only a connection may set, are
  refused by name (``RESERVED``, ``RESERVED_PREFIXES``); ``Authorization``
  is refused only while the job has its own authentication: without it, a
  header of your own may carry any scheme (``Authorization: Token …``).
* A credential or the header set that a request does not send is kept, as
  long as the authentication kind stays the same: a secret cannot be read
  back, so an edit of another field must not need it again.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from django.db import models

from jobs import crypto

MAX_HEADERS = 20
MAX_HEADER_NAME = 100
MAX_HEADER_VALUE = 4000
MAX_TOKEN = 4000
MAX_USERNAME = 200
MAX_PASSWORD = 1000

# RFC 9110's token characters: what a header name may be made of.
HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Visible ASCII, spaces and tabs inside: no CR, LF, NUL or other control
# character, which would end the header line and start another.
HEADER_VALUE = re.compile(r"[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?")
# A Bearer token is one visible word (RFC 6750 b64token, and more leniently
# any visible ASCII: JWTs and vendor keys).
TOKEN = re.compile(r"[\x21-\x7e]+")
# Control characters (C0, DEL, C1): never in a user name or password.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Set by Punctual on every request, or hop-by-hop (a connection's own, which
# a proxy drops): a job may not set them.
RESERVED = frozenset(
    {
        "host",
        "content-length",
        "idempotency-key",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
RESERVED_PREFIXES = ("webhook-", "proxy-")


class HttpMethod(models.TextChoices):
    GET = "GET", "GET"
    POST = "POST", "POST"
    PUT = "PUT", "PUT"
    PATCH = "PATCH", "PATCH"
    DELETE = "DELETE", "DELETE"


class BodyMode(models.TextChoices):
    ENVELOPE = "envelope", "The signed envelope (JSON)"
    PAYLOAD = "payload", "The job's payload as the raw JSON body"
    NONE = "none", "No body"


class AuthKind(models.TextChoices):
    NONE = "none", "None"
    BEARER = "bearer", "Bearer token"
    BASIC = "basic", "Basic (user name and password)"


# The fields a request may send, by the names both faces use.
CREDENTIALS = {
    AuthKind.BEARER: ("auth_token",),
    AuthKind.BASIC: ("auth_username", "auth_password"),
}
CREDENTIAL_FIELDS = ("auth_token", "auth_username", "auth_password")


def natural_body(method: str) -> str:
    """The body mode a method gets when none is given: none for GET and
    DELETE, what cron-job.org and EasyCron users expect; the envelope else."""
    return BodyMode.NONE if method in (HttpMethod.GET, HttpMethod.DELETE) else BodyMode.ENVELOPE


def body_problem(method: str, body_mode: str) -> str | None:
    if method == HttpMethod.GET and body_mode != BodyMode.NONE:
        return (
            "A GET request sends no body: set body_mode to none (many servers and proxies"
            " drop or refuse a GET with a body)."
        )
    return None


def reserved_names(names: list[str], *, with_auth: bool) -> list[str]:
    """The names among ``names`` that a job may not set, as they were sent."""
    refused = []
    for name in names:
        low = name.lower()
        reserved = low in RESERVED or low.startswith(RESERVED_PREFIXES)
        if reserved or (low == "authorization" and with_auth):
            refused.append(name)
    return refused


def headers_problem(headers: Any, *, with_auth: bool) -> str | None:
    """Why ``headers`` (an object of names and values) cannot be sent, or
    None. The value is never quoted back: it is a secret."""
    if not isinstance(headers, dict):
        return f"Expected an object of header names and values, not {type(headers).__name__}."
    if len(headers) > MAX_HEADERS:
        return f"At most {MAX_HEADERS} headers (got {len(headers)})."
    seen: set[str] = set()
    for name, value in headers.items():
        if not HEADER_NAME.fullmatch(name) or len(name) > MAX_HEADER_NAME:
            return (
                f"Header name {name[:MAX_HEADER_NAME]!r} is not valid: 1 to {MAX_HEADER_NAME}"
                " letters, digits and !#$%&'*+-.^_`|~ (no spaces or colons)."
            )
        if name.lower() in seen:
            return f"Header {name} is given twice (names are not case-sensitive)."
        seen.add(name.lower())
        if not isinstance(value, str):
            return f"The value of header {name} must be a string."
        if not HEADER_VALUE.fullmatch(value) or len(value) > MAX_HEADER_VALUE:
            return (
                f"The value of header {name} is not valid: 1 to {MAX_HEADER_VALUE} visible"
                " ASCII characters (spaces inside), with no line breaks or control characters."
            )
    refused = reserved_names(list(headers), with_auth=with_auth)
    if refused:
        return (
            f"Reserved header{'s' if len(refused) > 1 else ''}: {', '.join(refused)}."
            " Punctual sets these itself, or they belong to the connection"
            + (" (Authorization: the job's auth_kind sets it)." if with_auth else ".")
        )
    return None


def credential_problem(field: str, value: Any) -> str | None:
    if not isinstance(value, str):
        return "Must be a string."
    if field == "auth_token":
        if not TOKEN.fullmatch(value) or len(value) > MAX_TOKEN:
            return f"A Bearer token is 1 to {MAX_TOKEN:,} visible ASCII characters, no spaces."
    elif field == "auth_username":
        if not value or len(value) > MAX_USERNAME or ":" in value or CONTROL.search(value):
            return (
                f"A user name is 1 to {MAX_USERNAME} characters, with no colon and no"
                " control characters."
            )
    elif len(value) > MAX_PASSWORD or CONTROL.search(value):
        return f"A password is at most {MAX_PASSWORD:,} characters, with no control characters."
    return None


# -- at rest ------------------------------------------------------------------


def seal(value: Any) -> str:
    """A JSON value as a Fernet token; the empty string for nothing."""
    return crypto.encrypt(json.dumps(value)) if value else ""


def unseal(token: str) -> Any:
    """What ``seal`` made (``SecretUnavailable`` if the keys cannot read it)."""
    return json.loads(crypto.decrypt(token)) if token else None


def authorization(kind: str, credentials: dict[str, str] | None) -> str | None:
    """The Authorization header's value for the job's authentication."""
    if kind == AuthKind.BEARER and credentials:
        return f"Bearer {credentials['auth_token']}"
    if kind == AuthKind.BASIC and credentials:
        pair = f"{credentials['auth_username']}:{credentials['auth_password']}"
        return "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return None


# -- one request's options ----------------------------------------------------


@dataclass
class Stored:
    """What the job holds now (a new job: nothing)."""

    auth_kind: str = AuthKind.NONE
    auth_encrypted: str = ""
    header_names: tuple[str, ...] = ()
    headers_encrypted: str = ""

    @classmethod
    def of(cls, job: Any) -> Stored:
        if job is None:
            return cls()
        return cls(
            job.auth_kind, job.auth_encrypted, tuple(job.header_names), job.headers_encrypted
        )


def settle(
    stored: Stored, auth_kind: str, sent: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The model values to write for ``auth_kind`` and what a request ``sent``
    (any of ``headers`` and the ``CREDENTIAL_FIELDS``), and the errors by
    field. A secret that equals the stored one is not written again (a
    Fernet token differs each time), so resending it is not a change."""
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}
    credentials = _credentials(stored, auth_kind, sent, errors)
    if not errors:
        old = unseal(stored.auth_encrypted) if stored.auth_encrypted else None
        if credentials != old:
            values["auth_encrypted"] = seal(credentials)
    with_auth = auth_kind != AuthKind.NONE
    if "headers" in sent:
        headers = sent["headers"]
        problem = headers_problem(headers, with_auth=with_auth)
        if problem:
            errors["headers"] = problem
        else:
            old = unseal(stored.headers_encrypted) if stored.headers_encrypted else {}
            if headers != old:
                values["header_names"] = list(headers)
                values["headers_encrypted"] = seal(headers)
    elif with_auth and reserved_names(list(stored.header_names), with_auth=True):
        errors["headers"] = (
            "This job sends its own Authorization header: remove it from headers to set auth_kind."
        )
    return values, errors


def _credentials(
    stored: Stored, auth_kind: str, sent: dict[str, Any], errors: dict[str, str]
) -> dict[str, str] | None:
    """The credentials ``auth_kind`` needs: each one sent, or else the stored
    one while the kind stays the same; an error for a missing, unneeded or
    malformed one."""
    needed = CREDENTIALS.get(auth_kind, ())  # type: ignore[call-overload]
    for field in CREDENTIAL_FIELDS:
        if field in sent and field not in needed:
            errors[field] = f"Only with auth_kind {_kind_of(field)}."
        elif field in sent:
            problem = credential_problem(field, sent[field])
            if problem:
                errors[field] = problem
    if not needed:
        return None
    kept = unseal(stored.auth_encrypted) if stored.auth_kind == auth_kind else None
    credentials = {}
    for field in needed:
        if field in sent:
            credentials[field] = sent[field]
        elif kept and field in kept:
            credentials[field] = kept[field]
        elif field not in errors:
            errors[field] = f"Required with auth_kind {auth_kind}."
    return credentials


def _kind_of(field: str) -> str:
    return next(kind for kind, fields in CREDENTIALS.items() if field in fields)
