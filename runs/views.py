"""The runs API: lists, detail, operator retry, and the pull-worker protocol.

Pull workers get the very leases the internal workers get: claim and heartbeat
call ``runs.leases`` with ``target_kind="pull"``, and complete calls
``runs.outcomes``, so the fencing of README "What it guarantees" (lease owner and attempt
must match) and the retry rule (``runs.after_attempt``) are the same code. The
lease owner is ``pull:<owner id>:<worker name>``: two owners who name their
workers alike still hold different leases.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import asdict

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from core.api_base import ApiViewMixin
from core.api_errors import Conflict, error_response
from core.api_fields import EmptySerializer
from core.db import db_now
from jobs.models import Channel, Job
from runs import leases, outcomes
from runs.after_attempt import after_attempt
from runs.models import RetryNotAllowed, Run, RunKind, RunQuerySet, RunState
from runs.retry import Outcome
from runs.serializers import (
    ClaimedRunSerializer,
    ClaimSerializer,
    CompleteSerializer,
    HeartbeatSerializer,
    LeaseSerializer,
    RunDetailSerializer,
    RunFilterSerializer,
    RunSerializer,
)

_SYSTEM_RNG = random.SystemRandom()

LEASE_LOST = "The lease was lost: it expired and the run was claimed again, or it was never yours."


class RunCursor(CursorPagination):
    """Newest fire first. A cursor, not a page number: no COUNT(*) over a big
    table, and rows arriving at the top do not shift the pages being read."""

    ordering = ("-scheduled_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


FILTER_PARAMETERS = [
    OpenApiParameter("job", str, description="A job id."),
    OpenApiParameter("state", str, enum=RunState.values),
    OpenApiParameter("kind", str, enum=RunKind.values),
]


def filter_runs(queryset: RunQuerySet, request: Request) -> RunQuerySet:
    """Apply ?job=&state=&kind=; a malformed value is a 400 naming the parameter."""
    query = RunFilterSerializer(data=request.query_params.dict())
    query.is_valid(raise_exception=True)
    return queryset.filter(
        **{("job_id" if k == "job" else k): v for k, v in query.validated_data.items()}
    )


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
        request=ClaimSerializer,
        responses={200: ClaimedRunSerializer(many=True)},
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
        claimed = leases.claim(
            pull_lease_owner(request.user, data["worker"]),
            limit=data["limit"],
            lease_seconds=data["lease_seconds"],
            target_kind="pull",
            job_owner_id=request.user.pk,
            job_id=job_id,
        )
        return Response(ClaimedRunSerializer(claimed, many=True).data)

    @extend_schema(
        summary="Pull workers: extend the lease on a run",
        request=HeartbeatSerializer,
        responses={200: LeaseSerializer, 409: error_response(LEASE_LOST)},
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
        request=CompleteSerializer,
        responses={200: RunDetailSerializer, 409: error_response(LEASE_LOST)},
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
