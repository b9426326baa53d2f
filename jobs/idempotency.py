"""``Idempotency-Key`` for POST /jobs/ and POST /jobs/{id}/trigger/ (README "The REST API").

A client that lost the answer to a create or a trigger (a timeout, a dropped
connection) sends the same request again with the same key, and gets the first
answer back instead of a second job or a second run. This follows Stripe and
the IETF draft "The Idempotency-Key HTTP Header Field":

* keys are per owner, and live for 24 hours;
* only successful (2xx) answers are stored: after a 400 the client fixes the
  request and may reuse the key;
* the same key on a different request (method, path or body) answers 422;
* a replayed answer carries ``Idempotent-Replayed: true``.

How two concurrent requests with one key are kept to one effect:

1. Look the key up; a stored answer is replayed at once.
2. Otherwise insert the key row first, then do the work and store its answer
   in that row, all in one transaction.
3. The unique (owner, key) constraint lets only one of two racing inserts
   through: PostgreSQL makes the second wait on its insert until the first
   commits, and then fails it, so the second never does the work (it would
   otherwise trip over the job name the first one just took). It replays the
   first one's answer instead. No check-then-insert window is left open.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable

from django.db import IntegrityError, transaction
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from core.api_errors import UnprocessableKey
from core.db import db_now
from jobs import crypto
from jobs.models import IdempotencyKey

HEADER = "Idempotency-Key"
TTL = dt.timedelta(hours=24)
MAX_KEY_LENGTH = 255
SWEEP_BATCH = 100


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
    return IdempotencyKey.objects.filter(owner=owner, key=key, created_at__gte=now - TTL).first()


def _replay(stored: IdempotencyKey, fingerprint: str) -> Response:
    if stored.fingerprint != fingerprint:
        raise UnprocessableKey()
    data = json.loads(crypto.decrypt(stored.response_encrypted))
    return Response(data, status=stored.status_code, headers={"Idempotent-Replayed": "true"})


def _sweep(owner, key: str, now: dt.datetime) -> None:
    """Delete expired keys: this one (it would trip the unique constraint), and
    a bounded batch of others, so the table holds about a day of keys without
    a separate pruning job."""
    expired = IdempotencyKey.objects.filter(created_at__lt=now - TTL)
    expired.filter(owner=owner, key=key).delete()
    batch = list(expired.values_list("pk", flat=True)[:SWEEP_BATCH])
    if batch:
        IdempotencyKey.objects.filter(pk__in=batch).delete()


def respond(request: Request, handler: Callable[[], Response]) -> Response:
    """Answer ``request`` with ``handler()``, or with the stored answer to an
    earlier request that carried the same Idempotency-Key."""
    key = _key(request)
    if key is None:
        return handler()
    owner = request.user
    # Every API view needs an authenticated user (IsAuthenticated, in settings).
    assert owner.is_authenticated
    fingerprint = _fingerprint(request)
    now = db_now()
    stored = _stored(owner, key, now)
    if stored is not None:
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
            response = handler()
            if 200 <= response.status_code < 300:
                claim.status_code = response.status_code
                claim.response_encrypted = crypto.encrypt(
                    json.dumps(response.data, cls=JSONEncoder)
                )
                claim.save(update_fields=["status_code", "response_encrypted"])
            else:
                claim.delete()  # only successes are kept: the client may fix and retry
            return response
    except IntegrityError:
        # A concurrent request with this key committed first; ours rolled back.
        stored = _stored(owner, key, db_now())
        if stored is None:
            raise
        return _replay(stored, fingerprint)
