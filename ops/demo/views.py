"""The built-in demo receiver that ``make run`` points its demo job at.

It is what a careful receiver does, inside the project, so a newcomer can
watch the whole loop on one machine:

1. verify the Standard Webhooks signature with the job's secret (any of the
   secrets while a rotation overlaps), and refuse a stale timestamp;
2. de-duplicate on ``webhook-id`` (the run id): a redelivery of the same run
   is counted, never applied twice;
3. answer 200, or 401 when the signature does not verify.

Two addresses: ``/demo/receiver/<job id>/`` (the demo job's), and the
catch-all ``/demo/receiver/`` with any sub-path, which finds the job from
the ``webhook-id`` header (the run id, runs/identity.py: run, then its job,
then its secret), so an owner's own job can point at it as it is.

Both obey two switches in the query string, to watch failures happen:
``?status=500`` answers a verified delivery with that status (100 to 599),
``?delay=3`` answers it that many seconds late (0 to 60), past the job's
``timeout_seconds`` if you like. A bad switch is a 400 that names it, and
nothing is recorded.

``GET`` lists what it got, with whether each signature was valid, what it
answered and what state the run is in now. The views answer 404 unless
``DEBUG`` is on, so a production install never exposes an endpoint that
writes rows for anonymous callers.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hmac
import json
import re
import time
import uuid
from dataclasses import dataclass

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
STATUS_RANGE = (100, 599)
MAX_DELAY_SECONDS = 60
# No body: the HTTP rules for informational answers, 204 and 304.
_BODILESS = re.compile(r"1\d\d|204|304")


class BadSwitch(ValueError):
    """A status or delay switch out of its range; the message names it."""


@dataclass(frozen=True)
class Switches:
    """How to answer a verified delivery: ``?status=`` and ``?delay=``."""

    status: int = 200
    delay: float = 0.0

    @classmethod
    def parse(cls, query) -> Switches:
        status, delay = query.get("status"), query.get("delay")
        low, high = STATUS_RANGE
        if status is not None and not (
            re.fullmatch(r"[0-9]{3}", status) and low <= int(status) <= high
        ):
            raise BadSwitch(
                f"status must be an HTTP status code from {low} to {high} (got {status!r})"
            )
        seconds = _seconds(delay) if delay is not None else 0.0
        if seconds is None or not 0 <= seconds <= MAX_DELAY_SECONDS:
            raise BadSwitch(f"delay must be seconds from 0 to {MAX_DELAY_SECONDS} (got {delay!r})")
        return cls(status=int(status) if status is not None else 200, delay=seconds)


def _seconds(text: str) -> float | None:
    """``text`` as a number, else None ("3s"). "nan" and "inf" are numbers
    here, and the range check refuses them: nan compares false to any bound."""
    try:
        return float(text)
    except ValueError:
        return None


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


def _webhook_id(request: HttpRequest) -> str | None:
    msg_id = request.headers.get("webhook-id", "")
    return msg_id if msg_id and len(msg_id) <= 100 else None


def _bad_request(message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=400)


def _answer(switches: Switches, payload: dict[str, object]) -> HttpResponse:
    """The switched answer to a verified delivery, ``switches.delay`` late."""
    if switches.delay:
        time.sleep(switches.delay)
    response: HttpResponse
    if _BODILESS.fullmatch(str(switches.status)):
        response = HttpResponse(status=switches.status)
    else:
        response = JsonResponse(payload, status=switches.status)
    # An error status asked for is no error of the server's: Django would log
    # each one as "Internal Server Error" (django.request), and a newcomer
    # watching retries would read a crash into it. This marks it as logged.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def _receive(request: HttpRequest, job: Job, switches: Switches) -> HttpResponse:
    msg_id = _webhook_id(request)
    if msg_id is None:
        return _bad_request("missing or malformed webhook-id")
    now = timezone.now()
    body = request.body
    error = verify(job, request.headers, body, now)
    fields = _fire_fields(body) if not error else {}
    answered = {
        "last_status": 401 if error else switches.status,
        "last_request": request.get_full_path()[:300],
    }
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
                **answered,
                **fields,
            },
        )
        if not created:
            update: dict[str, object] = {
                "times_received": F("times_received") + 1,
                "last_received_at": now,
                **answered,
            }
            if not error and not row.signature_valid:
                # A forged request with this id came first; the real one wins.
                update.update(signature_valid=True, error="", **fields)
            DemoDelivery.objects.filter(pk=row.pk).update(**update)
    if error:
        return JsonResponse({"error": error}, status=401)
    return _answer(switches, {"received": msg_id, "duplicate": not created})


def _deliveries(job: Job | None) -> list[dict[str, object]]:
    """The newest deliveries, with the state each run is in now."""
    from runs.models import Run

    deliveries = DemoDelivery.objects.select_related("job")
    if job is not None:
        deliveries = deliveries.filter(job=job)
    rows = list(deliveries[:PAGE_SIZE])
    run_ids = []
    for row in rows:
        with contextlib.suppress(ValueError):  # a forged id that is not a run id
            run_ids.append(uuid.UUID(row.webhook_id))
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
            "last_status": row.last_status,
            "last_request": row.last_request,
            "run_state": states.get(row.webhook_id, ""),
        }
        for row in rows
    ]


def _page(request: HttpRequest, job: Job | None) -> HttpResponse:
    deliveries = _deliveries(job)
    if request.GET.get("format") == "json":
        return JsonResponse({"job_id": str(job.pk) if job else None, "deliveries": deliveries})
    return render(request, "demo/deliveries.html", {"job": job, "deliveries": deliveries})


def _switched_receive(request: HttpRequest, job: Job) -> HttpResponse:
    """Receive for ``job``, answering as the query string's switches say."""
    try:
        switches = Switches.parse(request.GET)
    except BadSwitch as exc:
        return _bad_request(str(exc))
    return _receive(request, job, switches)


def _job_of_run(request: HttpRequest) -> Job | None:
    """The job whose run the ``webhook-id`` header names: the run id is the
    fire's identity (runs/identity.py), and its run row names the job."""
    try:
        run_id = uuid.UUID(_webhook_id(request) or "")
    except ValueError:
        return None
    return Job.objects.filter(runs__pk=run_id).first()


@never_cache
@csrf_exempt  # receivers are called by machines, with a signature instead of a CSRF token
@require_http_methods(["GET", "HEAD", "POST"])
def receiver_view(request: HttpRequest, job_id: uuid.UUID) -> HttpResponse:
    _enabled()
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise Http404("no such job")
    if request.method == "POST":
        return _switched_receive(request, job)
    return _page(request, job)


@never_cache
@csrf_exempt  # as above
@require_http_methods(["GET", "HEAD", "POST"])
def catch_all_view(request: HttpRequest, subpath: str) -> HttpResponse:
    """``/demo/receiver/`` and any path under it: the job comes from the run
    that ``webhook-id`` names, so any job may point here unchanged."""
    _enabled()
    if request.method != "POST":
        return _page(request, None)
    job = _job_of_run(request)
    if job is None:
        return JsonResponse(
            {"error": "webhook-id is not the id of any run (it is the run id Punctual sends)"},
            status=404,
        )
    return _switched_receive(request, job)


@never_cache
@require_safe
def index_view(request: HttpRequest) -> HttpResponse:
    _enabled()
    return _page(request, None)
