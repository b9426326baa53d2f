"""The jobs API (docs/guides/api.md; each endpoint in docs/reference/api.md "Jobs"):
CRUD, the job verbs, previews, events, runs.

Every endpoint finds its job through ``Job.objects.for_owner``: another owner's
job is the same 404 as one that never existed. Every write locks the job row
(``SELECT ... FOR UPDATE``) for its transaction, which does two things:
``If-Match`` is checked and the write made with nothing in between, and the
dispatcher (which locks due jobs with SKIP LOCKED) can neither advance the job
under us nor have its advance overwritten by our save of a stale copy.
"""

from __future__ import annotations

import datetime as dt
import functools
import zoneinfo
from typing import Any

from django.db import transaction
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
)
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from alerts import selection
from api.job_creation import Created, Items, Validated, create_context, insert_many, validate_many
from api.job_serializers import (
    BackfillResultSerializer,
    BackfillSerializer,
    FiresSerializer,
    JobCreatedSerializer,
    JobEventSerializer,
    JobFilterSerializer,
    JobSavedSerializer,
    JobSerializer,
    PauseSerializer,
    PreviewQuerySerializer,
    ResumedJobSerializer,
    ResumeSerializer,
    SchedulePreviewAnswerSerializer,
    SchedulePreviewSerializer,
    ScheduleWarnings,
    SecretSerializer,
)
from api.run_serializers import RunSerializer
from api.run_views import FILTER_PARAMETERS, RunCursor, runs_response
from core.api_base import ApiViewMixin, check_if_match, etag
from core.api_errors import UnprocessableKey, error_response
from core.api_fields import EmptySerializer
from core.db import db_now
from core.paginators import ApiCursor
from jobs import idempotency, lookups, quotas
from jobs.display import describe_schedule
from jobs.models import Channel, Job, JobEvent, JobQuerySet, JobStatus, TargetKind
from jobs.schedules import Schedule
from runs import job_verbs
from runs.job_verbs import MAX_BACKFILL
from runs.last_run import last_runs
from runs.models import Run

IF_MATCH = OpenApiParameter(
    "If-Match",
    str,
    OpenApiParameter.HEADER,
    description='"<version>" from the ETag: the write happens only if the job is still there.',
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    description="A repeat with the same key within 24 hours answers the first answer again.",
)
PRECONDITION_FAILED = error_response("If-Match does not name the current version.")
LOCATION = OpenApiParameter(
    "Location",
    str,
    OpenApiParameter.HEADER,
    response=[201],
    description="The new job's URL, for a create of one job (a list create has none).",
)
KEY_REUSED = error_response(UnprocessableKey.default_detail)
KEY_STALE = error_response(
    "The Idempotency-Key created a job that has since been deleted, or whose secret has"
    " since been rotated: the answer is not replayed."
)
DATETIME = serializers.DateTimeField()
# Jobs per bulk create (a JSON list): one transaction, and one answer, of at most this many.
MAX_BULK_CREATE = 1000
# Named here: inside the view set, "list" is its list action.


# One job, or a list of them: written out, since drf-spectacular gives a list
# serializer no bounds. JobRequest is the job's request component (PUT's body).
CREATE_BODY = {
    "oneOf": [
        {"$ref": "#/components/schemas/JobRequest"},
        {
            "type": "array",
            "items": {"$ref": "#/components/schemas/JobRequest"},
            "minItems": 1,
            "maxItems": MAX_BULK_CREATE,
            "description": "A bulk create: all of these jobs, or none of them.",
        },
    ]
}


# The export: a list of jobs in the form a create takes (JobRequest).
EXPORT_BODY = {"type": "array", "items": {"$ref": "#/components/schemas/JobRequest"}}


def filter_jobs(queryset: JobQuerySet, request: Request) -> JobQuerySet:
    """Apply ?state=&target_kind=&tag=&search= as the admin's jobs list
    does (the same queryset methods); an unknown parameter or a malformed
    value is a 400 naming it. Repeated tags narrow: a job must carry all."""
    filters = JobFilterSerializer.from_query(request.query_params).validated_data
    if "state" in filters:
        queryset = queryset.shown_as(filters["state"])
    if "target_kind" in filters:
        queryset = queryset.filter(target_kind=filters["target_kind"])
    return queryset.tagged(filters.get("tag", [])).search(filters.get("search", ""))


LIST_FILTERS = [
    OpenApiParameter(
        "state",
        str,
        enum=JobStatus.values,
        description="finished: active jobs with no fire left (their end_at is past, or"
        " their one-off fired).",
    ),
    OpenApiParameter("target_kind", str, enum=TargetKind.values),
    OpenApiParameter(
        "tag",
        str,
        many=True,
        explode=True,
        description="Jobs that carry this tag; repeat it for jobs that carry all of them.",
    ),
    OpenApiParameter(
        "search",
        str,
        description=(
            "Words that must all appear (in any case) in the name, the URL or the description."
        ),
    ),
]


class JobCursor(ApiCursor):
    ordering = ("name", "id")


class EventCursor(ApiCursor):
    ordering = ("-created_at", "-id")


def _iso(value: dt.datetime | str | None) -> str | None:
    """Times in answers look the same everywhere: DRF's ISO form with "Z"."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return DATETIME.to_representation(value) if value else None


def _check_list_size(items: Items) -> None:
    """A bulk create's list holds 1 to ``MAX_BULK_CREATE`` jobs."""
    if not items:
        raise serializers.ValidationError(
            {"non_field_errors": ["Send one job, or a list of 1 to 1,000 jobs."]}
        )
    if len(items) > MAX_BULK_CREATE:
        raise serializers.ValidationError(
            {
                "non_field_errors": [
                    f"At most {MAX_BULK_CREATE:,} jobs per request (got {len(items):,});"
                    " send them in several requests."
                ]
            }
        )


@extend_schema_view(
    list=extend_schema(
        summary="List your jobs (filtered by state, target kind, tags, words)",
        description=("An unknown query parameter is a 400 naming it: a filter is never ignored."),
        parameters=LIST_FILTERS,
    ),
    retrieve=extend_schema(summary="A job (with an ETag)"),
    create=extend_schema(
        summary="Create a job, or up to 1,000 at once (answers their secrets, once)",
        description=(
            "A JSON object creates one job: the answer is that job, with a Location header"
            " naming its URL. A JSON list creates all of its jobs or none of them: the"
            " answer is the list of jobs, in the order sent, and has no Location header."
            " Each job's `warnings` say what its schedule may do unexpectedly."
        ),
        parameters=[IDEMPOTENCY_KEY, LOCATION],
        request={"application/json": CREATE_BODY},
        responses={
            201: PolymorphicProxySerializer(
                component_name="JobsCreated",
                serializers=[JobCreatedSerializer, JobCreatedSerializer(many=True)],
                resource_type_field_name=None,
                many=False,
            ),
            409: KEY_STALE,
            422: KEY_REUSED,
        },
    ),
    update=extend_schema(
        summary="Replace a job",
        parameters=[IF_MATCH],
        responses={200: JobSavedSerializer, 412: PRECONDITION_FAILED},
    ),
    partial_update=extend_schema(
        summary="Change some fields of a job",
        parameters=[IF_MATCH],
        responses={200: JobSavedSerializer, 412: PRECONDITION_FAILED},
    ),
    destroy=extend_schema(
        summary="Delete a job (cancels its waiting runs)",
        parameters=[IF_MATCH],
        responses={204: None, 412: PRECONDITION_FAILED},
    ),
)
class JobViewSet(ApiViewMixin, viewsets.GenericViewSet):
    serializer_class = JobSerializer
    pagination_class = JobCursor
    lookup_value_regex = "[^/]+"  # a malformed id reaches the view and gets the same JSON 404

    def get_queryset(self):
        return Job.objects.for_owner(self.request.user).select_related("owner")

    def get_job(self, *, lock: bool = False) -> Job:
        queryset = self.get_queryset()
        if lock:
            queryset = queryset.select_for_update(of=("self",))
        return get_object_or_404(queryset, pk=self.kwargs["pk"])

    def context(self, **extra: Any) -> dict[str, Any]:
        return {"request": self.request, "view": self, **extra}

    def job_response(self, job: Job, code: int = status.HTTP_200_OK, **extra: Any) -> Response:
        data = {**JobSerializer(job, context=self.context()).data, **extra}
        return Response(data, status=code, headers={"ETag": etag(job.version)})

    # -- CRUD -----------------------------------------------------------------

    def list(self, request):
        page = self.paginate_queryset(filter_jobs(self.get_queryset(), request))
        assert page is not None  # pagination_class is set: every list is paginated
        # Every job's last run (runs/last_run.py) in one query for the page.
        ids = [job.pk for job in page]
        context = self.context(last_runs=last_runs(ids), alert_channels=selection.chosen(ids))
        data = JobSerializer(page, many=True, context=context).data
        return self.get_paginated_response(data)

    def retrieve(self, request, pk=None):
        return self.job_response(self.get_job())

    def _look_up_hosts(self, items: Items) -> lookups.Answers:
        """The host names of the webhook URLs ``items`` send, looked up now,
        before any transaction (jobs/lookups.py): the serializer's ``resolve``."""
        urls = [item.get("url") for item in items if isinstance(item, dict)]
        try:
            return lookups.look_up_hosts(urls, owner=self.request.user.pk)
        except lookups.TooManyHosts as exc:
            raise serializers.ValidationError({"non_field_errors": [str(exc)]}) from None

    def create(self, request):
        # One job (a JSON object), or up to 1,000 (a JSON list), all or none.
        response = idempotency.respond(request, lambda: self._check_create(request))
        if response.status_code == status.HTTP_201_CREATED and isinstance(response.data, dict):
            # A single create, first answered or replayed: where the job lives.
            # A list has no one URL, and answers none.
            response["Location"] = reverse("job-detail", args=[response.data["id"]])
        return response

    def _check_create(self, request: Request) -> idempotency.Write:
        """Validate a create, outside any transaction (an Idempotency-Key's
        included): its host names are looked up first, all at once. Return
        the write."""
        if isinstance(request.data, list):
            _check_list_size(request.data)
            return self._check_many(request, request.data, self._look_up_hosts(request.data))
        resolve = self._look_up_hosts([request.data])
        now, limits, taken = create_context(request.user, [request.data])
        # Filled once the job is written: its channels, at no query.
        chosen_channels: dict = {}
        # One serializer both ways: building DRF fields costs more than using them.
        # A new job has no runs, so no query looks for its last one.
        body = JobSerializer(
            data=request.data,
            context=self.context(
                owner=request.user,
                now=now,
                last_runs={},
                limits=limits,
                taken_names=taken,
                resolve=resolve,
                alert_channels=chosen_channels,
            ),
        )
        body.is_valid(raise_exception=True)

        def write() -> Response:
            chosen = body.validated_data.get("alert_channels") or []
            [(job, secret)] = self._insert(request, [body.validated_data], now, limits)
            chosen_channels[job.pk] = chosen
            warnings = ScheduleWarnings(now).for_job(job)
            data = {**body.to_representation(job), "secret": secret, "warnings": warnings}
            headers = {"ETag": etag(job.version)}
            return Response(data, status=status.HTTP_201_CREATED, headers=headers)

        return write

    def _check_many(
        self, request: Request, items: Items, resolve: lookups.Answers
    ) -> idempotency.Write:
        """A bulk create: each item validated exactly as a single create, the
        errors named by index, nothing written on any error
        (api/job_creation.py). The set-based parts (the name clash check, the
        inserts of the jobs, their spans and their events) are one statement
        each. Their host names were looked up before (``resolve``), each once."""
        chosen_channels: dict = {}  # filled once the jobs are written
        body, valid, _, limits = validate_many(
            request.user,
            items,
            resolve=resolve,
            context=self.context(alert_channels=chosen_channels),
        )

        def write() -> Response:
            # Validating a thousand jobs takes a while: the jobs start from the
            # database's time as they are written, not as the request arrived.
            now = db_now()
            chosen = [attrs.get("alert_channels") or [] for attrs in valid]
            created = self._insert(request, valid, now, limits)
            chosen_channels.update(
                {job.pk: ids for (job, _), ids in zip(created, chosen, strict=True)}
            )
            warnings = ScheduleWarnings(now)
            data = [
                {
                    **body.to_representation(job),
                    "secret": secret,
                    "warnings": warnings.for_job(job),
                }
                for job, secret in created
            ]
            return Response(data, status=status.HTTP_201_CREATED)

        return write

    def _insert(
        self, request: Request, validated: Validated, now: dt.datetime, limits: quotas.Limits
    ) -> Created:
        """The jobs, created by the request's user (api/job_creation.py)."""
        assert request.user.is_authenticated  # IsAuthenticated, the API's default permission
        return insert_many(
            request.user,
            validated,
            now,
            limits,
            actor=request.user,
            channel=Channel.API,
            # Inside an Idempotency-Key's transaction, a savepoint only for a
            # list, whose clash is named by a query afterwards.
            savepoint=len(validated) > 1,
        )

    def update(self, request, pk=None):
        return self._update(request, partial=False)

    def partial_update(self, request, pk=None):
        return self._update(request, partial=True)

    def _update(self, request: Request, *, partial: bool) -> Response:
        # Before the job's row is locked: no connection waits on DNS.
        resolve = self._look_up_hosts([request.data])
        now = db_now()
        with transaction.atomic():
            job = self.get_job(lock=True)
            check_if_match(request, job.version)
            body = JobSerializer(
                job,
                data=request.data,
                partial=partial,
                context=self.context(now=now, resolve=resolve),
            )
            body.is_valid(raise_exception=True)
            # Only what the request changed (job_verbs.edit): the row is
            # locked, but a column this request did not send is still not its
            # to write. Sending what is already there is not a change: no new
            # version, no event.
            chosen = body.validated_data.pop("alert_channels", None)
            job_verbs.edit(job, body.validated_data, actor=request.user, channel=Channel.API)
            if chosen is not None:
                selection.choose(job.pk, chosen)
        return self.job_response(job, warnings=ScheduleWarnings(now).for_job(job))

    def destroy(self, request, pk=None):
        with transaction.atomic():
            job = self.get_job(lock=True)
            check_if_match(request, job.version)
            job_verbs.soft_delete(job, actor=request.user, channel=Channel.API)
        return Response(status=status.HTTP_204_NO_CONTENT)

    # -- verbs ----------------------------------------------------------------

    @extend_schema(summary="Pause: stop new fires, cancel waiting runs", request=PauseSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        with transaction.atomic():
            job = self.get_job(lock=True)
            body = PauseSerializer(data=request.data, context=self.context(now=db_now()))
            body.is_valid(raise_exception=True)
            job_verbs.pause(job, **body.validated_data, actor=request.user, channel=Channel.API)
        return self.job_response(job)

    @extend_schema(
        summary="Resume from now (optionally catching up, or as a dry run)",
        request=ResumeSerializer,
        responses={200: ResumedJobSerializer},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        with transaction.atomic():
            job = self.get_job(lock=True)
            body = ResumeSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            plan = job_verbs.resume(
                job, **body.validated_data, actor=request.user, channel=Channel.API
            )
        return self.job_response(
            job,
            resume={
                "catch_up": [_iso(f) for f in plan["catch_up"]],
                "next_fire_at": _iso(plan["next_fire_at"]),
                "created": plan["created"],
                "dry_run": body.validated_data["dry_run"],
            },
        )

    @extend_schema(
        summary="Fire now: a manual run",
        description=(
            "A run of kind `manual`, scheduled now and delivered like any other, with"
            " the job's retries. It starts at once even while the job is paused (the job"
            " stays paused). It counts against `triggers_per_minute`."
        ),
        request=None,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: RunSerializer, 422: KEY_REUSED},
    )
    @action(detail=True, methods=["post"])
    def trigger(self, request, pk=None):
        return self._make_run_once(request, self._trigger)

    def _trigger(self, request: Request) -> Response:
        with transaction.atomic():
            job = self.get_job(lock=True)
            # respond() has checked the key's form before calling us.
            key = request.headers.get(idempotency.HEADER)
            run = job_verbs.trigger(
                job, idempotency_key=key, actor=request.user, channel=Channel.API
            )
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Send a test delivery: one attempt, now",
        description=(
            "What the admin's *Send test delivery* does: a run of kind `test`, made now,"
            " with one attempt and no retries, delivered at once even while the job is"
            " paused (the job stays paused). Its outcome neither adds to nor resets the"
            " job's failure streak. It counts against `triggers_per_minute`, as a trigger"
            " does, and answers as a trigger does: the new run."
        ),
        request=None,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: RunSerializer, 422: KEY_REUSED},
    )
    @action(detail=True, methods=["post"], url_path="test", url_name="test")
    def test_delivery(self, request, pk=None):
        return self._make_run_once(request, self._test_delivery)

    def _make_run_once(self, request: Request, write) -> Response:
        """A verb that takes no body and makes a run (trigger, test delivery):
        404 before the key is looked at, then ``write`` under the request's
        Idempotency-Key. Nothing more to check: the write is all."""
        self.get_job()
        EmptySerializer(data=request.data).is_valid(raise_exception=True)
        return idempotency.respond(request, lambda: functools.partial(write, request))

    def _test_delivery(self, request: Request) -> Response:
        with transaction.atomic():
            job = self.get_job(lock=True)
            run = job_verbs.send_test_delivery(job, actor=request.user, channel=Channel.API)
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="A new secret; the old one keeps signing for 24 hours",
        request=None,
        responses={200: SecretSerializer},
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, pk=None):
        with transaction.atomic():
            job = self.get_job(lock=True)
            EmptySerializer(data=request.data).is_valid(raise_exception=True)
            secret = job.rotate_secret(actor=request.user, channel=Channel.API)
        data = {"secret": secret, "previous_secret_until": job.previous_secret_until}
        return Response(SecretSerializer(data).data, headers={"ETag": etag(job.version)})

    @extend_schema(
        summary="Turn the past fires of a window into backfill runs",
        request=BackfillSerializer,
        responses={200: BackfillResultSerializer},
    )
    @action(detail=True, methods=["post"])
    def backfill(self, request, pk=None):
        with transaction.atomic():
            job = self.get_job(lock=True)
            body = BackfillSerializer(data=request.data, context=self.context(now=db_now()))
            body.is_valid(raise_exception=True)
            start, end, dry_run = (body.validated_data[k] for k in ("start", "end", "dry_run"))
            if job.schedule.count_fires_between(start, end, cap=MAX_BACKFILL + 1) > MAX_BACKFILL:
                raise serializers.ValidationError(
                    {"end": [f"The window holds more than {MAX_BACKFILL:,} fires; narrow it."]}
                )
            result = job_verbs.backfill(
                job, start, end, dry_run=dry_run, actor=request.user, channel=Channel.API
            )
        return Response({"slots": [_iso(s) for s in result["slots"]], "created": result["created"]})

    # -- reads ----------------------------------------------------------------

    @extend_schema(
        summary="The next fire times",
        parameters=[
            OpenApiParameter("count", int, description="1 to 100 (default 5)."),
            OpenApiParameter("after", OpenApiTypes.DATETIME, description="Default: now."),
        ],
        responses={200: FiresSerializer},
    )
    @action(detail=True, methods=["get"])
    def preview(self, request, pk=None):
        job = self.get_job()
        query = PreviewQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        now = db_now()
        fires = job.schedule.next_fires(
            query.validated_data.get("after") or now, query.validated_data["count"]
        )
        return fires_response(fires, ScheduleWarnings(now).for_job(job))

    @extend_schema(
        summary="The job's audit events, newest first", responses=JobEventSerializer(many=True)
    )
    @action(
        detail=True,
        methods=["get"],
        pagination_class=EventCursor,
        serializer_class=JobEventSerializer,
    )
    def events(self, request, pk=None):
        job = self.get_job()
        events = JobEvent.objects.filter(job=job).select_related("actor")
        page = self.paginate_queryset(events)
        return self.get_paginated_response(JobEventSerializer(page, many=True).data)

    @extend_schema(
        summary="The job's runs, newest fire first",
        parameters=[p for p in FILTER_PARAMETERS if p.name != "job"],
        responses=RunSerializer(many=True),
    )
    @action(
        detail=True, methods=["get"], pagination_class=RunCursor, serializer_class=RunSerializer
    )
    def runs(self, request, pk=None):
        job = self.get_job()
        queryset = Run.objects.for_owner(request.user).filter(job=job).select_related("job")
        return runs_response(self, request, queryset)

    @extend_schema(
        summary="Your live jobs, as a list that a bulk create accepts as it is (no secrets)",
        description=(
            "Every field a create takes, for each of your live jobs, ordered by name. An"
            " interval job without `start_at` answers its creation time there, which its"
            " steps count from, so a job made from the answer keeps the same phase. No"
            " secret is answered: each job made from it gets a new one, and none of its extra"
            " headers or its authentication (`auth_kind` included), which are secrets too:"
            " set them again on the new job. More than 1,000"
            " jobs are sent back in several requests."
        ),
        responses={200: EXPORT_BODY},
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def export(self, request):
        fields = {
            name: field
            for name, field in JobSerializer().fields.items()
            if not (field.read_only or field.write_only or name in NOT_EXPORTED)
        }
        jobs = self.get_queryset().order_by("name", "id")
        return Response([exported(job, fields) for job in jobs])


# Left out of the export with the secrets they need (the write-only
# headers and credentials): a job made from the export has no authentication
# until its credentials are set again, rather than a kind it cannot use.
NOT_EXPORTED = frozenset({"auth_kind"})


def exported(job: Job, fields: dict[str, serializers.Field]) -> dict[str, Any]:
    """``job`` as a create would take it: its writable fields as the API
    writes them, and an interval job's anchor spelt out as ``start_at``."""
    out = {}
    for name, field in fields.items():
        value = field.get_attribute(job)
        out[name] = None if value is None else field.to_representation(value)
    # (Not past an end: such a job has no fire to keep in phase, and its
    # end must stay after its start.)
    ended = job.end_at is not None and job.end_at <= job.created_at
    if job.interval_seconds is not None and job.start_at is None and not ended:
        out["start_at"] = fields["start_at"].to_representation(job.created_at)
    return out


class SchedulePreviewView(ApiViewMixin, APIView):
    @extend_schema(
        summary="Check a schedule and list its next fires, without saving anything",
        request=SchedulePreviewSerializer,
        responses={200: SchedulePreviewAnswerSerializer},
    )
    def post(self, request):
        now = db_now()
        body = SchedulePreviewSerializer(data=request.data, context={"now": now})
        body.is_valid(raise_exception=True)
        data = body.validated_data
        # A schedule not saved with any job: it counts as a job created now
        # would (Schedule.for_job).
        schedule = Schedule.for_job(
            cron=data["cron"],
            interval_seconds=data["interval_seconds"],
            timezone=data["timezone"],
            start_at=data["start_at"],
            created_at=now,
            run_at=data["run_at"],
            end_at=data["end_at"],
        )
        fires = schedule.next_fires(data.get("after") or now, data["count"])
        warnings = ScheduleWarnings(now)(
            data["cron"], data["timezone"], run_at=data["run_at"], end_at=data["end_at"]
        )
        answer = fires_response(fires, warnings)
        # The admin's live preview shows the fires in the job's zone, and the
        # schedule in words.
        zone = zoneinfo.ZoneInfo(data["timezone"])
        answer.data["local_fires"] = [f.astimezone(zone).isoformat() for f in fires]
        answer.data["description"] = describe_schedule(
            data["cron"],
            data["interval_seconds"],
            data["timezone"],
            run_at=data["run_at"],
            end_at=data["end_at"],
        )
        return answer


def fires_response(fires: list[dt.datetime], warnings: list[str]) -> Response:
    """A preview's answer: the next fires, and what the schedule may do unexpectedly."""
    return Response({"fires": [_iso(f) for f in fires], "warnings": warnings})
