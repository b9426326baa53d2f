"""``Idempotency-Key`` for POST /jobs/, /jobs/{id}/trigger/ and /jobs/{id}/test/
(docs/guides/api.md "Idempotency-Key").

A client that lost the answer to a create or a trigger (a timeout, a dropped
connection) sends the same request again with the same key, and gets the first
answer back instead of a second job or a second run. This follows Stripe and
the IETF draft "The Idempotency-Key HTTP Header Field":

* keys are per owner, and live for 24 hours;
* only successful (2xx) answers are stored: after a 400 the client fixes the
  request and may reuse the key;
* the same key on a different request (method, path or body) answers 422;
* a replayed answer carries ``Idempotent-Replayed: true``.

A job create answers the job's secret, once. The stored answer never holds
it: the secret is taken out before the answer is stored, and the row keeps
instead a digest of each created job's stored (encrypted) secret. A replay
puts the job's current secret back only if that digest still matches; a job
deleted since, or whose secret was rotated since, answers 409 and shows no
secret (``_with_current_secrets``). So a replay never hands out a secret
that no longer signs, or one a later rotation meant to retire.

How two concurrent requests with one key are kept to one effect:

1. Look the key up; a stored answer is replayed at once.
2. Otherwise check the request, outside any transaction: validating it, and
   looking its URLs' host names up (jobs/lookups.py), may take a while, and
   no connection waits meanwhile. A refusal ends here, and keeps nothing,
   unless a request with the same key committed meanwhile: its jobs may be
   what the check refused (their names are taken now), and its answer is
   replayed instead, as if this request had come a moment later.
3. Then insert the key row first, do the write and store its answer in that
   row, all in one transaction.
4. The unique (owner, key) constraint lets only one of two racing inserts
   through: PostgreSQL makes the second wait on its insert until the first
   commits, and then fails it, so the second never does the write (it would
   otherwise trip over the job name the first one just took). It replays the
   first one's answer instead. A first request's jobs and its key row
   commit together, so a check that sees the jobs finds the key too (2.)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from core.api_errors import Conflict, UnprocessableKey
from core.db import db_now, delete_oldest
from jobs import crypto
from jobs.models import IdempotencyKey, Job

HEADER = "Idempotency-Key"
TTL = dt.timedelta(hours=24)
MAX_KEY_LENGTH = 255
SWEEP_BATCH = 100
# The field of a create answer that holds the job's secret.
SECRET = "secret"
# Answers, or items of a list answer.
Answer = dict[str, Any] | list[Any]
# What a request's check hands back: the write, to run in the key's transaction.
Write = Callable[[], Response]


def _key(request: Request) -> str | None:
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not key or len(key) > MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise exceptions.ValidationError(
            {HEADER: [f"Use 1 to {MAX_KEY_LENGTH} printable ASCII characters."]}
        )
    return key


def _fingerprint(request: Request) -> str:
    body = json.dumps(request.data, sort_keys=True, separators=(",", ":"), cls=JSONEncoder)
    text = f"{request.method} {request.path}\n{body}"
    return hashlib.sha256(text.encode()).hexdigest()


def _stored(owner, key: str, now: dt.datetime) -> IdempotencyKey | None:
    return IdempotencyKey.objects.filter(owner=owner, key=key, created_at__gte=expiry(now)).first()


def _items(data: Answer) -> list[Any]:
    return data if isinstance(data, list) else [data]


def split_secrets(data: Answer) -> tuple[Answer, dict[str, str]]:
    """``data`` without its secrets, and ``{job id: secret}`` for the items
    (jobs) that held one."""
    secrets = {
        str(item["id"]): item[SECRET]
        for item in _items(data)
        if isinstance(item, dict) and SECRET in item
    }
    if not secrets:
        return data, {}

    def without(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: v for k, v in item.items() if k != SECRET}
        return item

    stripped = [without(item) for item in data] if isinstance(data, list) else without(data)
    return stripped, secrets


def token_digest(secret_encrypted: str) -> str:
    """What a stored answer remembers of a job's secret: the SHA-256 of its
    encrypted form, which changes with every rotation and tells nothing."""
    return hashlib.sha256(secret_encrypted.encode()).hexdigest()


def _digests(secrets: dict[str, str]) -> dict[str, str]:
    """``{job id: token_digest}`` for each job whose secret an answer held (a
    job not found gets a digest that matches nothing: it is never replayed)."""
    jobs = Job.objects.filter(pk__in=list(secrets)).values_list("pk", "secret_encrypted")
    tokens = {str(pk): token for pk, token in jobs}
    return {pk: token_digest(tokens[pk]) if pk in tokens else "" for pk in secrets}


def _with_current_secrets(data: Answer, digests: dict[str, str]) -> Answer:
    """The stored answer with each job's secret put back, or a 409 naming
    the jobs deleted, or whose secret was rotated, since it was given."""
    jobs = Job.objects.filter(pk__in=list(digests)).only("pk", "deleted_at", "secret_encrypted")
    current = {str(job.pk): job for job in jobs}
    deleted = [pk for pk in digests if pk not in current or current[pk].deleted_at is not None]
    if deleted:
        raise Conflict(
            f"This {HEADER} created {_jobs(deleted)}, which {_has(deleted)} since been deleted;"
            " the answer is not replayed."
        )
    rotated = [
        pk for pk, digest in digests.items() if token_digest(current[pk].secret_encrypted) != digest
    ]
    if rotated:
        raise Conflict(
            f"This {HEADER} created {_jobs(rotated)}, whose secret {_has(rotated)} since been"
            " rotated; a secret is shown only once, so the answer is not replayed."
        )
    for item in _items(data):
        if isinstance(item, dict) and str(item.get("id")) in digests:
            item[SECRET] = crypto.decrypt(current[str(item["id"])].secret_encrypted)
    return data


def _jobs(ids: list[str]) -> str:
    return ("job " if len(ids) == 1 else "jobs ") + ", ".join(ids)


def _has(ids: list[str]) -> str:
    return "has" if len(ids) == 1 else "have"


def _replay(stored: IdempotencyKey, fingerprint: str) -> Response:
    if stored.fingerprint != fingerprint:
        raise UnprocessableKey()
    data = json.loads(crypto.decrypt(stored.response_encrypted))
    if stored.secret_digests:
        data = _with_current_secrets(data, stored.secret_digests)
    return Response(data, status=stored.status_code, headers={"Idempotent-Replayed": "true"})


def _store(claim: IdempotencyKey, response: Response) -> None:
    """Keep a successful answer in its key's row: encrypted (it holds the
    job's payload), without secrets, with the digests that guard them."""
    data, secrets = split_secrets(response.data)
    claim.status_code = response.status_code
    claim.response_encrypted = crypto.encrypt(json.dumps(data, cls=JSONEncoder))
    claim.secret_digests = _digests(secrets)
    claim.save(update_fields=["status_code", "response_encrypted", "secret_digests"])


def expiry(now: dt.datetime) -> dt.datetime:
    """Keys created before this are expired."""
    return now - TTL


def _sweep(owner, key: str, now: dt.datetime) -> None:
    """Delete expired keys: this one (it would trip the unique constraint), and
    a bounded batch of others. Retention (runs/retention.py) deletes the rest,
    so the table holds about a day of keys."""
    IdempotencyKey.objects.filter(owner=owner, key=key, created_at__lt=expiry(now)).delete()
    delete_oldest(IdempotencyKey, expiry(now), SWEEP_BATCH)


def respond(request: Request, check: Callable[[], Write]) -> Response:
    """Answer ``request`` with the stored answer to an earlier request that
    carried the same Idempotency-Key, or else with ``check()()``: ``check``
    validates the request (raising its refusal) outside any transaction, and
    returns the write, which runs inside the key's transaction."""
    key = _key(request)
    if key is None:
        return check()()
    owner = request.user
    # Every API view needs an authenticated user (IsAuthenticated, in settings).
    assert owner.is_authenticated
    fingerprint = _fingerprint(request)
    now = db_now()
    stored = _stored(owner, key, now)
    if stored is not None:
        return _replay(stored, fingerprint)
    try:
        write = check()
    except exceptions.APIException:
        stored = _stored(owner, key, db_now())
        if stored is None:
            raise
        return _replay(stored, fingerprint)
    try:
        with transaction.atomic():
            _sweep(owner, key, now)
            # Claim the key before doing the work: a concurrent request with
            # the same key waits on this insert until we commit, then fails it.
            claim = IdempotencyKey.objects.create(
                owner=owner,
                key=key,
                fingerprint=fingerprint,
                status_code=0,
                response_encrypted="",
                created_at=now,
            )
            response = write()
            if 200 <= response.status_code < 300:
                _store(claim, response)
            else:
                claim.delete()  # only successes are kept: the client may fix and retry
            return response
    except IntegrityError:
        # A concurrent request with this key committed first; ours rolled back.
        stored = _stored(owner, key, db_now())
        if stored is None:
            raise
        return _replay(stored, fingerprint)
