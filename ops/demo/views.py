"""The built-in demo receiver that ``make run`` points its demo job at.

It is what a careful receiver does, inside the project, so a newcomer can
watch the whole loop on one machine:

1. verify the Standard Webhooks signature with the job's secret (any of the
   secrets while a rotation overlaps), and refuse a stale timestamp;
2. de-duplicate on ``webhook-id`` (the run id): a redelivery of the same run
   is counted, never applied twice;
3. answer 200, or 401 when the signature does not verify.

``GET`` lists what it got, with whether each signature was valid and what
state the run is in now. The views answer 404 unless ``DEBUG`` is on, so a
production install never exposes an endpoint that writes rows for anonymous
callers.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
import uuid

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_safe

from dispatch.webhooks import secret_key_bytes, sign
from jobs import crypto
from jobs.models import Job
from ops.demo.models import DemoDelivery

# Standard Webhooks' default: a captured request cannot be replayed later.
TIMESTAMP_TOLERANCE = dt.timedelta(minutes=5)
PAGE_SIZE = 100


def _enabled() -> None:
    if not settings.DEBUG:
        raise Http404("the demo receiver runs only with DEBUG=true (make run)")


def verify(job: Job, headers, body: bytes, now: dt.datetime) -> str:
    """Check one request's signature. Returns "" if valid, else why not."""
    msg_id = headers.get("webhook-id", "")
    timestamp = headers.get("webhook-timestamp", "")
    offered = headers.get("webhook-signature", "").split()
    try:
        ts = int(timestamp)
    except ValueError:
        return "missing or malformed webhook-timestamp"
    if abs(now.timestamp() - ts) > TIMESTAMP_TOLERANCE.total_seconds():
        return "webhook-timestamp is too far from now"
    try:
        secrets = job.signing_secrets(now)
    except crypto.SecretUnavailable:
        return "the job's secret cannot be decrypted with the configured keys"
    for secret in secrets:
        expected = sign(secret_key_bytes(secret), msg_id, ts, body).encode()
        # Constant-time comparison: a timing leak would let a caller guess a
        # signature byte by byte.
        if any(hmac.compare_digest(expected, sig.encode()) for sig in offered):
            return ""
    return "no signature matches the job's secret"


def _fire_fields(body: bytes) -> dict[str, object]:
    """attempt and scheduled_at from the body, best effort (for the page)."""
    try:
        data = json.loads(body)["data"]
        return {
            "attempt": int(data["attempt"]),
            "scheduled_at": parse_datetime(data["scheduled_at"]),
        }
    except (ValueError, KeyError, TypeError):
        return {}


def _receive(request: HttpRequest, job: Job) -> JsonResponse:
    msg_id = request.headers.get("webhook-id", "")
    if not msg_id or len(msg_id) > 100:
        return JsonResponse({"error": "missing or malformed webhook-id"}, status=400)
    now = timezone.now()
    body = request.body
    error = verify(job, request.headers, body, now)
    fields = _fire_fields(body) if not error else {}
    with transaction.atomic():
        # The de-duplication: one row per webhook-id, whatever the number of
        # deliveries. get_or_create survives two deliveries racing (the
        # unique index decides, and the loser reads the winner's row).
        row, created = DemoDelivery.objects.select_for_update().get_or_create(
            webhook_id=msg_id,
            defaults={
                "job": job,
                "signature_valid": not error,
                "error": error[:200],
                "first_received_at": now,
                "last_received_at": now,
                **fields,
            },
        )
        if not created:
            update: dict[str, object] = {
                "times_received": F("times_received") + 1,
                "last_received_at": now,
            }
            if not error and not row.signature_valid:
                # A forged request with this id came first; the real one wins.
                update.update(signature_valid=True, error="", **fields)
            DemoDelivery.objects.filter(pk=row.pk).update(**update)
    if error:
        return JsonResponse({"error": error}, status=401)
    return JsonResponse({"received": msg_id, "duplicate": not created})


def _deliveries(job: Job | None) -> list[dict[str, object]]:
    """The newest deliveries, with the state each run is in now."""
    from runs.models import Run

    deliveries = DemoDelivery.objects.select_related("job")
    if job is not None:
        deliveries = deliveries.filter(job=job)
    rows = list(deliveries[:PAGE_SIZE])
    run_ids = []
    for row in rows:
        try:
            run_ids.append(uuid.UUID(row.webhook_id))
        except ValueError:
            pass  # a forged id that is not a run id
    states = {
        str(pk): state
        for pk, state in Run.objects.filter(pk__in=run_ids).values_list("pk", "state")
    }
    return [
        {
            "webhook_id": row.webhook_id,
            "job_id": str(row.job_id),
            "job_name": row.job.name,
            "attempt": row.attempt,
            "scheduled_at": row.scheduled_at.isoformat() if row.scheduled_at else None,
            "signature_valid": row.signature_valid,
            "error": row.error,
            "times_received": row.times_received,
            "first_received_at": row.first_received_at.isoformat(),
            "last_received_at": row.last_received_at.isoformat(),
            "run_state": states.get(row.webhook_id, ""),
        }
        for row in rows
    ]


def _page(request: HttpRequest, job: Job | None) -> HttpResponse:
    deliveries = _deliveries(job)
    if request.GET.get("format") == "json":
        return JsonResponse({"job_id": str(job.pk) if job else None, "deliveries": deliveries})
    return render(request, "demo/deliveries.html", {"job": job, "deliveries": deliveries})


@never_cache
@csrf_exempt  # receivers are called by machines, with a signature instead of a CSRF token
@require_http_methods(["GET", "HEAD", "POST"])
def receiver_view(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    _enabled()
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise Http404("no such job")
    if request.method == "POST":
        return _receive(request, job)
    return _page(request, job)


@never_cache
@require_safe
def index_view(request: HttpRequest) -> HttpResponse:
    _enabled()
    return _page(request, None)
