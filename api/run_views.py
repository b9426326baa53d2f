"""The runs API: lists, detail, operator retry, and the pull-worker protocol.

Pull workers get the very leases the internal workers get: claim and heartbeat
call ``runs.leases`` with ``target_kind="pull"``, and complete calls
``runs.outcomes``, so the fencing of docs/design/guarantees.md "Fencing" (lease owner and attempt
must match) and the retry rule (``runs.after_attempt``) are the same code. The
lease owner is ``pull:<owner id>:<worker name>``: two owners who name their
workers alike still hold different leases.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import asdict

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response

from api import claim_waits
from api.run_serializers import (
    ClaimedRunSerializer,
    ClaimSerializer,
    CompleteSerializer,
    HeartbeatSerializer,
    LeaseSerializer,
    RunDetailSerializer,
    RunFilterSerializer,
    RunSerializer,
)
from core.api_base import ApiViewMixin
from core.api_errors import Conflict, error_response
from core.api_fields import EmptySerializer
from core.db import db_now
from core.paginators import ApiCursor
from jobs.models import Channel, Job
from runs import leases, outcomes
from runs.after_attempt import after_attempt
from runs.models import LATE_AFTER, RetryNotAllowed, Run, RunKind, RunQuerySet, RunState
from runs.retry import Outcome

_SYSTEM_RNG = random.SystemRandom()

LEASE_LOST = "The lease was lost: it expired and the run was claimed again, or it was never yours."


class RunCursor(ApiCursor):
    ordering = ("-scheduled_at", "-id")  # newest fire first


FILTER_PARAMETERS = [
    OpenApiParameter("job", str, description="A job id."),
    OpenApiParameter("state", str, enum=RunState.values),
    OpenApiParameter("kind", str, enum=RunKind.values),
    OpenApiParameter(
        "late",
        bool,
        description=(
            f"true: only the late runs, those that started over {LATE_AFTER.seconds} s after"
            f" their fire time, or are still pending {LATE_AFTER.seconds} s after they became"
            " due (a backfill is never late); false: only the others."
        ),
    ),
]


# Response examples of the pull-worker protocol, one run through its life.
_RUN_ID = "6f1c2a4e-8d2b-5c3e-9a41-0b7d5e2f9c10"
_JOB_ID = "3a9e7c1b-2f4d-4e6a-8b0c-1d2e3f4a5b6c"
CLAIM_EXAMPLE = OpenApiExample(
    "One run claimed",
    response_only=True,
    status_codes=["200"],
    value={
        "id": _RUN_ID,
        "job": _JOB_ID,
        "job_name": "sync-inventory",
        "scheduled_at": "2026-05-04T09:00:00Z",
        "kind": "scheduled",
        "attempt": 1,
        "lease_until": "2026-05-04T09:00:31Z",
        "payload": {"warehouse": "eu-1"},
    },
)
HEARTBEAT_EXAMPLE = OpenApiExample(
    "The lease, extended",
    response_only=True,
    status_codes=["200"],
    value={"lease_until": "2026-05-04T09:00:41Z"},
)
COMPLETE_EXAMPLE = OpenApiExample(
    "The run succeeded",
    response_only=True,
    status_codes=["200"],
    value={
        "id": _RUN_ID,
        "job": _JOB_ID,
        "job_name": "sync-inventory",
        "scheduled_at": "2026-05-04T09:00:00Z",
        "kind": "scheduled",
        "state": "succeeded",
        "reason": "",
        "attempt": 1,
        "max_attempts": 3,
        "available_at": None,
        "lease_owner": "",
        "lease_until": None,
        "created_at": "2026-05-04T08:59:59.812000Z",
        "started_at": "2026-05-04T09:00:01.034000Z",
        "finished_at": "2026-05-04T09:00:12.410000Z",
        "lag_seconds": 1.034,
        "last_status_code": None,
        "last_error": "",
        "last_response": "1,204 items synced",
        "attempts": [
            {
                "number": 1,
                "worker": "pull:7:host-1",
                "started_at": "2026-05-04T09:00:01.034000Z",
                "finished_at": "2026-05-04T09:00:12.410000Z",
                "outcome": "succeeded",
                "status_code": None,
                "duration_ms": 11376,
                "error": "",
                "response": "1,204 items synced",
            }
        ],
    },
)


def filter_runs(queryset: RunQuerySet, request: Request) -> RunQuerySet:
    """Apply ?job=&state=&kind=&late=; a malformed value is a 400 naming the parameter."""
    query = RunFilterSerializer(data=request.query_params.dict())
    query.is_valid(raise_exception=True)
    filters = dict(query.validated_data)
    if "late" in filters:
        queryset = queryset.late(filters.pop("late"))
    return queryset.filter(**{("job_id" if k == "job" else k): v for k, v in filters.items()})


def pull_lease_owner(user, worker: str) -> str:
    return f"pull:{user.pk}:{worker}"


@extend_schema_view(
    list=extend_schema(summary="List runs, newest fire first", parameters=FILTER_PARAMETERS),
    retrieve=extend_schema(summary="A run, with its attempts"),
)
class RunViewSet(ApiViewMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = RunSerializer
    pagination_class = RunCursor
    lookup_value_regex = "[^/]+"  # a malformed id reaches the view and gets the same JSON 404

    def get_queryset(self):
        return Run.objects.for_owner(self.request.user).select_related("job")

    def filter_queryset(self, queryset):
        return filter_runs(queryset, self.request) if self.action == "list" else queryset

    def get_run(self) -> Run:
        return get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])

    def retrieve(self, request, pk=None):
        run = get_object_or_404(
            self.get_queryset().prefetch_related("attempts"), pk=self.kwargs["pk"]
        )
        return Response(RunDetailSerializer(run).data)

    @extend_schema(
        summary="Retry a failed or missed run",
        description=(
            "Puts the run back to `pending`, with the same id and more attempts. A retry counts"
            " against its job's `triggers_per_minute`, with the job's manual runs and test"
            " deliveries: over it, 429 with `Retry-After` (403 when the limit is 0)."
        ),
        request=None,
        responses={200: RunDetailSerializer, 409: error_response("The run is not failed/missed.")},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        run = self.get_run()
        EmptySerializer(data=request.data).is_valid(raise_exception=True)
        if run.job.deleted_at is not None:
            raise Conflict("The run's job was deleted.")
        try:
            run.retry(actor=request.user, channel=Channel.API)
        except RetryNotAllowed as exc:
            raise Conflict(str(exc)) from None
        return Response(RunDetailSerializer(run).data)

    @extend_schema(
        summary="Pull workers: claim due runs of your own pull jobs",
        description=(
            "Takes up to `limit` due runs of your pull jobs (or of one `job`) and leases them"
            " to `worker` for `lease_seconds`. With `wait_seconds`, a claim that finds nothing"
            " waits up to that long and answers as soon as a run becomes claimable (a long"
            " poll): claim again at once after an empty answer. Without it, an empty list"
            " means nothing is due: wait a little before claiming again. Keep each run's `id`"
            " and `attempt`: heartbeat and complete need them, and the `id` stays the same"
            " through every retry, so use it to make the work idempotent. Each web process"
            " lets only a few claims wait at once (half of them for one owner): past that, a"
            " claim that finds nothing answers 429 with `Retry-After`."
        ),
        request=ClaimSerializer,
        responses={200: ClaimedRunSerializer(many=True)},
        examples=[CLAIM_EXAMPLE],
    )
    @action(detail=False, methods=["post"], pagination_class=None)
    def claim(self, request):
        body = ClaimSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        job_id = None
        if data["job"] is not None:
            # Only the caller's own jobs, even for a superuser: a worker drains
            # its owner's queue. Anything else is the same 404 as no such job.
            job = get_object_or_404(
                Job.objects.for_owner(request.user).filter(owner=request.user), pk=data["job"]
            )
            if job.target_kind != "pull":
                raise serializers.ValidationError({"job": ["This is not a pull job."]})
            job_id = job.pk

        def claim_once() -> list[leases.Claimed]:
            return leases.claim(
                pull_lease_owner(request.user, data["worker"]),
                limit=data["limit"],
                lease_seconds=data["lease_seconds"],
                target_kind="pull",
                job_owner_id=request.user.pk,
                job_id=job_id,
            )

        try:
            claimed = claim_waits.claim_waiting(
                claim_once, wait_seconds=data["wait_seconds"], owner_id=request.user.pk
            )
        except claim_waits.TooManyWaiting:
            raise exceptions.Throttled(
                wait=claim_waits.RETRY_AFTER,
                detail="Too many claims wait in this web process: claim again later.",
            ) from None
        return Response(ClaimedRunSerializer(claimed, many=True).data)

    @extend_schema(
        summary="Pull workers: extend the lease on a run",
        description=(
            "Send one every third of the lease while the work goes on. The lease never"
            " outlives the attempt's deadline (the job's `timeout_seconds` + 5 s). A 409"
            " means the run is no longer yours: stop the work, and do not complete it."
        ),
        request=HeartbeatSerializer,
        responses={200: LeaseSerializer, 409: error_response(LEASE_LOST)},
        examples=[HEARTBEAT_EXAMPLE],
    )
    @action(detail=True, methods=["post"])
    def heartbeat(self, request, pk=None):
        run = self.get_run()
        body = HeartbeatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        owner = self._lease_owner(request, run, data.get("worker"))
        kept = leases.heartbeat(
            owner,
            [(run.pk, data["attempt"])],
            lease_seconds=data.get("lease_seconds"),
            scheduled=[run.scheduled_at],
        )
        if run.pk not in kept:
            raise Conflict(LEASE_LOST)
        return Response(LeaseSerializer({"lease_until": kept[run.pk]}).data)

    @extend_schema(
        summary="Pull workers: report the outcome of an attempt",
        description=(
            "`succeeded` ends the run; `failed` retries it with the job's backoff while"
            " attempts remain, unless `retryable` is false. `response` is kept as the run's"
            " `last_response`, `error` as its `last_error`. A 409 means the lease was lost"
            " and the result was dropped: another attempt has the run."
        ),
        request=CompleteSerializer,
        responses={200: RunDetailSerializer, 409: error_response(LEASE_LOST)},
        examples=[COMPLETE_EXAMPLE],
    )
    @action(detail=True, methods=["post"])
    def complete(self, request, pk=None):
        run = self.get_run()
        body = CompleteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        owner = self._lease_owner(request, run, data.get("worker"))
        now = db_now()
        result = _result(run, data, now)
        done = outcomes.complete(owner, [result], now=now)
        if run.pk not in done.applied:
            raise Conflict(LEASE_LOST)
        run = Run.objects.select_related("job").prefetch_related("attempts").get(pk=run.pk)
        return Response(RunDetailSerializer(run).data)

    def _lease_owner(self, request: Request, run: Run, worker: str | None) -> str:
        """The lease owner to fence on.

        With ``worker``, it is exact. Without, it is the run's current owner if
        that is one of the caller's pull workers: the attempt number still
        fences, because every claim, by any worker, counts a new attempt.
        """
        if worker:
            return pull_lease_owner(request.user, worker)
        mine = pull_lease_owner(request.user, "")
        if run.lease_owner.startswith(mine):
            return run.lease_owner
        raise Conflict(LEASE_LOST)


def _result(run: Run, data: dict, now: dt.datetime) -> outcomes.Result:
    """A pull worker's report, as the result to write: runs/after_attempt.py
    decides the run's next state, exactly as it does for webhooks."""
    if data["status"] == RunState.SUCCEEDED:
        outcome = Outcome.SUCCESS
    else:
        outcome = Outcome.RETRYABLE if data["retryable"] else Outcome.PERMANENT
    decision = after_attempt(
        outcome,
        attempt=data["attempt"],
        max_attempts=run.max_attempts,
        backoff_seconds=run.job.retry_backoff_seconds,
        now=now,
        rng=_SYSTEM_RNG,
    )
    started = run.attempt_started_at
    return outcomes.Result(
        run_id=run.pk,
        job_id=run.job_id,
        attempt=data["attempt"],
        error=data["error"][:2000],
        response=data["response"],
        started_at=started,
        duration_ms=max(0, int((now - started).total_seconds() * 1000)) if started else None,
        scheduled_at=run.scheduled_at,
        **asdict(decision),
    )


def runs_response(view, request: Request, queryset: RunQuerySet) -> Response:
    """One page of a run list (used by /runs/ and /jobs/{id}/runs/)."""
    paginator = RunCursor()
    page = paginator.paginate_queryset(filter_runs(queryset, request), request, view=view)
    return paginator.get_paginated_response(RunSerializer(page, many=True).data)
