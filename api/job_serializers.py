"""API representations of jobs, their events and schedule previews.

Validation follows docs/guides/api.md "Input rules" exactly; the schedule rules are
``jobs.schedules``' own validators, and the URL rule is
``jobs.targets.check_url``, so the API, the admin and the worker agree on
what is valid. Writes go through the views, which call the model's verbs.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from alerts import selection
from core.api_fields import (
    AwareDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSerializer,
    UtcDateTimeField,
)
from jobs import http_options, quotas
from jobs.http_options import AuthKind, BodyMode, HttpMethod
from jobs.limits import MAX_LENGTHS, RANGES, payload_problem
from jobs.models import Job, JobEvent, JobStatus, MisfirePolicy, OverlapPolicy, TargetKind
from jobs.schedules import (
    Schedule,
    ScheduleError,
    cron_risks,
    ending_warnings,
    validate_cron,
    validate_timezone,
)
from jobs.tags import (
    MAX_TAG_LENGTH,
    MAX_TAGS,
    RULE,
    TAG_PATTERN,
    TagError,
    clean_tags,
    tag_problem,
)
from jobs.targets import UnsafeTargetError, check_url, configured_rule
from runs.last_run import last_runs
from runs.models import RunState

MAX_PREVIEW = 100
SCHEDULE_FIELDS = ("cron", "interval_seconds", "run_at", "timezone", "start_at", "end_at")
# The fields that say which kind of schedule a job has: exactly one is set.
SCHEDULE_KINDS = ("cron", "interval_seconds", "run_at")


@extend_schema_field({"type": "object", "additionalProperties": True})
class PayloadField(serializers.Field):
    """The job's payload, judged by ``jobs.limits.payload_problem``: the admin's
    payload box uses the same rule, so both refuse a value in the same words."""

    def to_internal_value(self, data):
        reason = payload_problem(data)
        if reason:
            raise serializers.ValidationError(reason)
        return data

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "type": "array",
        "items": {
            "type": "string",
            "pattern": f"^{TAG_PATTERN.pattern}$",
            "maxLength": MAX_TAG_LENGTH,
        },
        "maxItems": MAX_TAGS,
        "description": (
            f"Up to {MAX_TAGS} short labels to group and find jobs by, each {RULE}."
            " Letters are lower-cased and a repeated tag is kept once."
        ),
    }
)
class TagsField(serializers.Field):
    """A job's tags, judged by ``jobs.tags.clean_tags``, as the admin's tags box is."""

    def to_internal_value(self, data):
        if not isinstance(data, list):
            raise serializers.ValidationError(
                f"Expected a list of tags, not {type(data).__name__}."
            )
        try:
            return clean_tags(data)
        except TagError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value):
        return list(value)


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "string", "maxLength": http_options.MAX_HEADER_VALUE},
        "maxProperties": http_options.MAX_HEADERS,
        "writeOnly": True,
        "description": (
            "Extra request headers, {name: value}. The values are secrets: stored encrypted,"
            " never answered (header_names lists the names). Sending it replaces every"
            " header; not sending it keeps them. Reserved names are refused."
        ),
    }
)
class HeadersField(serializers.Field):
    """The extra headers: judged whole by ``jobs.http_options.settle``, as
    the admin's headers box is, so that both refuse in the same words."""

    def to_internal_value(self, data):
        return data

    def to_representation(self, value):
        return value


def schedule_errors(values: dict[str, Any], created_at) -> dict[str, list[str]]:
    """Errors of a whole schedule (``values``: every name of SCHEDULE_FIELDS),
    by field: the rules that span fields. ``created_at``: the job's, or for a
    job not made yet the time it would be (now), as ``Schedule.for_job``'s
    anchor rule reads it."""
    kinds = [name for name in SCHEDULE_KINDS if values[name] is not None]
    if len(kinds) != 1:
        message = (
            "Set exactly one of cron, interval_seconds and run_at (send null for the others"
            " to switch between them)."
        )
        return {name: [message] for name in (kinds or SCHEDULE_KINDS)}
    try:
        Schedule.for_job(
            cron=values["cron"],
            interval_seconds=values["interval_seconds"],
            timezone=values["timezone"],
            start_at=values["start_at"],
            created_at=created_at,
            run_at=values["run_at"],
            end_at=values["end_at"],
        )
    except ScheduleError as exc:
        return {exc.field or kinds[0]: [str(exc)]}
    return {}


class ScheduleWarnings:
    """The warnings every answer that saves or previews a schedule carries:
    ``jobs.schedules.cron_risks`` (fires that a DST change skips or repeats,
    days missing from some months, day-of-month OR day-of-week), in the year
    from ``now``. An interval schedule has none. Memoized per schedule, so a
    bulk create of many jobs that share a cron reads the zone rules once."""

    def __init__(self, now) -> None:
        self.now = now
        self._seen: dict[tuple[str, str], list[str]] = {}

    def __call__(self, cron: str | None, timezone: str, *, run_at=None, end_at=None) -> list[str]:
        ending = ending_warnings(run_at=run_at, end_at=end_at, now=self.now)
        if not cron:
            return ending
        key = (cron, timezone)
        if key not in self._seen:
            self._seen[key] = cron_risks(cron, timezone, now=self.now)
        return [*self._seen[key], *ending]

    def for_job(self, job: Job) -> list[str]:
        return self(job.cron, job.timezone, run_at=job.run_at, end_at=job.end_at)


WARNINGS_FIELD_HELP = (
    "What this schedule may do that its owner did not picture: fire times a daylight "
    "saving change skips or repeats, days some months lack, a run_at or end_at already "
    "past. Saved all the same."
)


def warnings_field():
    return serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text=WARNINGS_FIELD_HELP
    )


class ScheduleFieldsMixin(serializers.Serializer):
    """The schedule fields, shared by jobs and the ad hoc schedule preview."""

    # Every bound is read from jobs/limits.py, as the model's and the admin's are.
    cron = StrictCharField(
        max_length=MAX_LENGTHS["cron"],
        allow_null=True,
        default=None,
        help_text="5-field cron, or @hourly, @daily, @weekly, @monthly, @yearly.",
    )
    interval_seconds = StrictIntegerField(
        **RANGES["interval_seconds"].bounds(), allow_null=True, default=None
    )
    timezone = StrictCharField(
        max_length=MAX_LENGTHS["timezone"], default="UTC", help_text="IANA zone name."
    )
    start_at = AwareDateTimeField(allow_null=True, default=None)
    run_at = AwareDateTimeField(
        allow_null=True,
        default=None,
        help_text=(
            "A one-off job's one fire, instead of cron or interval_seconds. A time already"
            " past is saved, with a warning, and never fires."
        ),
    )
    end_at = AwareDateTimeField(
        allow_null=True,
        default=None,
        help_text=(
            "No fire after this time (one exactly at it still fires); after start_at and"
            " run_at. Once its last fire is made, the job shows as finished."
        ),
    )

    def validate_cron(self, value):
        if value is None:
            return None
        try:
            return validate_cron(value)
        except ScheduleError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate_timezone(self, value):
        try:
            return validate_timezone(value)
        except ScheduleError as exc:
            raise serializers.ValidationError(str(exc)) from None


# The job list's own query parameters, and those every list takes (its
# cursor, its page size, DRF's ?format=).
JOB_FILTERS = ("state", "target_kind", "tag", "search")
LIST_PARAMETERS = ("cursor", "page_size", "format")
MAX_SEARCH = 200


class JobFilterSerializer(serializers.Serializer):
    """The job list's filters (docs/guides/api.md "Finding jobs"). Unlike
    the run lists, an unknown parameter is refused, naming it: a mistyped
    filter that was ignored would answer every job as if it had matched."""

    state = serializers.ChoiceField(choices=JobStatus.choices, required=False)
    target_kind = serializers.ChoiceField(choices=TargetKind.choices, required=False)
    # Each tag is judged by validate_tag, in the words of jobs/tags.py.
    tag = serializers.ListField(
        child=serializers.CharField(trim_whitespace=False, allow_blank=True), required=False
    )
    search = serializers.CharField(required=False, allow_blank=True, max_length=MAX_SEARCH)

    @classmethod
    def from_query(cls, query) -> JobFilterSerializer:
        """Validated ``query`` (a QueryDict): each filter once, but ``tag``
        as often as wanted; anything else is an error naming it."""
        errors: dict[str, list[str]] = {}
        data: dict[str, Any] = {}
        for name in query:
            values = query.getlist(name)
            if name == "tag":
                data[name] = values
            elif name in JOB_FILTERS:
                if len(values) > 1:
                    errors[name] = [f"Give {name} once (got it {len(values)} times)."]
                data[name] = values[-1]
            elif name not in LIST_PARAMETERS:
                errors[name] = [
                    "Unknown query parameter: the job list takes "
                    + ", ".join((*JOB_FILTERS, "cursor", "page_size"))
                    + "."
                ]
        body = cls(data=data)
        valid = body.is_valid()
        errors = {**(body.errors if not valid else {}), **errors}
        if errors:
            raise serializers.ValidationError(errors)
        return body

    def validate_tag(self, values: list[str]) -> list[str]:
        for value in values:
            problem = tag_problem(value)
            if problem:
                raise serializers.ValidationError(problem)
        return list(dict.fromkeys(value.strip().lower() for value in values))


class LastRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    state = serializers.ChoiceField(choices=RunState.choices)
    scheduled_at = UtcDateTimeField()
    finished_at = UtcDateTimeField(allow_null=True)


@extend_schema_serializer(
    description=(
        "A job: its schedule (exactly one of cron, interval_seconds and run_at, a one-off"
        " time; end_at ends any of them), its target (a"
        " webhook URL, or a pull queue) and its retry and misfire rules. PUT replaces the"
        " job: an omitted optional field goes back to its default. PATCH changes only the"
        " fields it sends."
    ),
    examples=[
        OpenApiExample(
            "A nightly webhook",
            request_only=True,
            value={
                "name": "nightly-report",
                "cron": "0 2 * * *",
                "timezone": "Europe/Berlin",
                "url": "https://receiver.example.com/hooks/punctual",
                "payload": {"report": "daily"},
            },
        ),
        OpenApiExample(
            "Once, on Christmas Eve",
            request_only=True,
            value={
                "name": "christmas-greeting",
                "run_at": "2026-12-24T18:00:00+01:00",
                "url": "https://receiver.example.com/hooks/punctual",
            },
        ),
        OpenApiExample(
            "A pull queue, every five minutes",
            request_only=True,
            value={
                "name": "sync-inventory",
                "interval_seconds": 300,
                "target_kind": "pull",
                "max_attempts": 5,
            },
        ),
    ],
)
@extend_schema_field({"type": "array", "items": {"type": "integer"}})
class AlertChannelsField(serializers.Field):
    """The job's own alert channels, by id: ``[]`` (the default) means all
    of its owner's channels (docs/guides/alerts.md)."""

    def __init__(self, **kwargs: Any) -> None:
        # PUT replaces: omitted, the job goes back to all of its owner's
        # channels. PATCH leaves what it does not send.
        super().__init__(source="*", default=lambda: {"alert_channels": []}, **kwargs)

    def get_attribute(self, instance: Job) -> Job:
        return instance

    def to_representation(self, job: Job) -> list[int]:
        known = self.parent.context.get("alert_channels")
        if known is None:
            known = selection.chosen([job.pk])
        return known.get(job.pk, [])

    def to_internal_value(self, data: Any) -> dict[str, list[int]]:
        if not isinstance(data, list) or any(
            isinstance(i, bool) or not isinstance(i, int) for i in data
        ):
            raise serializers.ValidationError("A list of alert channel ids.")
        ids = sorted(set(data))
        job = self.parent.instance
        owner_id = job.owner_id if job is not None else self.parent.context["owner"].pk
        reason = selection.refusal(owner_id, ids)
        if reason:
            raise serializers.ValidationError(reason)
        return {"alert_channels": ids}


class JobSerializer(ScheduleFieldsMixin, StrictSerializer):
    """A job as the API reads and writes it (docs/guides/api.md "Input rules").

    PUT replaces: an omitted optional field goes back to its default. PATCH
    changes only the fields it sends.
    """

    extra_read_only = {
        "secret": ("The secret is generated by the server; POST to rotate-secret for a new one."),
    }

    id = serializers.UUIDField(read_only=True)
    name = StrictCharField(max_length=MAX_LENGTHS["name"])
    description = StrictCharField(
        max_length=MAX_LENGTHS["description"], allow_blank=True, default="", trim_whitespace=False
    )
    target_kind = StrictChoiceField(choices=TargetKind.choices, default=TargetKind.WEBHOOK)
    url = StrictCharField(
        max_length=MAX_LENGTHS["url"],
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="http or https; required for webhook jobs. Must not reach a private address.",
    )
    payload = PayloadField(default=dict)
    method = StrictChoiceField(
        choices=HttpMethod.choices,
        default=HttpMethod.POST,
        help_text="The HTTP method of each delivery.",
    )
    body_mode = StrictChoiceField(
        choices=BodyMode.choices,
        required=False,
        help_text=(
            "envelope: the signed JSON envelope; payload: the job's payload as the raw JSON"
            " body; none: no body (GET must use none). Not sent: none for GET and DELETE,"
            " envelope otherwise (a PATCH keeps the job's, unless its new method is GET)."
        ),
    )
    headers = HeadersField(write_only=True, required=False)
    header_names = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="The names of the job's extra headers (their values are never answered).",
    )
    auth_kind = StrictChoiceField(
        choices=AuthKind.choices,
        default=AuthKind.NONE,
        help_text="none, bearer (auth_token) or basic (auth_username and auth_password).",
    )
    auth_token = StrictCharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="With auth_kind bearer: sent as Authorization: Bearer <token>. Never answered.",
    )
    auth_username = StrictCharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="With auth_kind basic. Stored encrypted, never answered.",
    )
    auth_password = StrictCharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="With auth_kind basic (may be empty). Stored encrypted, never answered.",
    )
    tags = TagsField(default=list)
    timeout_seconds = StrictIntegerField(**RANGES["timeout_seconds"].bounds(), default=30)
    max_attempts = StrictIntegerField(**RANGES["max_attempts"].bounds(), default=3)
    retry_backoff_seconds = StrictIntegerField(
        **RANGES["retry_backoff_seconds"].bounds(), default=10
    )
    misfire_policy = StrictChoiceField(choices=MisfirePolicy.choices, default=MisfirePolicy.SKIP)
    max_catchup = StrictIntegerField(**RANGES["max_catchup"].bounds(), default=3)
    misfire_grace_seconds = StrictIntegerField(
        **RANGES["misfire_grace_seconds"].bounds(), default=60
    )
    overlap_policy = StrictChoiceField(choices=OverlapPolicy.choices, default=OverlapPolicy.SKIP)
    jitter_seconds = StrictIntegerField(**RANGES["jitter_seconds"].bounds(), default=0)
    pause_after_failures = StrictIntegerField(
        **RANGES["pause_after_failures"].bounds(), allow_null=True, default=None
    )
    alert_channels = AlertChannelsField(
        help_text="Ids of your alert channels this job's alerts go to; [] (the default):"
        " all of them."
    )

    state = serializers.ChoiceField(
        source="status",
        choices=JobStatus.choices,
        read_only=True,
        help_text=(
            "active, paused, or finished: active with no fire left to come (its end_at is"
            " past, or its one-off fired). A manual trigger still runs a finished job."
        ),
    )
    pause_note = serializers.CharField(read_only=True)
    system_pause_note = serializers.CharField(
        read_only=True,
        help_text=(
            "Why the system paused the job (a 410 Gone, a failure streak, an unreadable"
            " schedule), empty otherwise. It stays while the job is paused, also when you"
            " pause it again with a note of your own (`pause_note`); a resume clears it."
        ),
    )
    paused_at = UtcDateTimeField(read_only=True, allow_null=True)
    resume_at = UtcDateTimeField(read_only=True, allow_null=True)
    consecutive_failures = serializers.IntegerField(read_only=True)
    next_fire_at = UtcDateTimeField(
        read_only=True,
        allow_null=True,
        help_text=(
            "The job's next fire. null when it is finished, or while it is parked (`parked_since`)."
        ),
    )
    parked_since = UtcDateTimeField(
        read_only=True,
        allow_null=True,
        help_text=(
            "Set while the job is parked: an interval job under overlap `skip` whose run"
            " was still active when the dispatcher, behind, found this fire and the next"
            " due at once. Its fires from here on are skipped"
            " (one skipped run stands for them all, its `fires` counting them) until that"
            " run ends; its next fire is then the first one from the run's end on."
        ),
    )
    missed_count = serializers.IntegerField(
        read_only=True,
        help_text="Fires missed past a recovery's cap of 100 recorded rows: counted, not listed.",
    )
    missed_since = UtcDateTimeField(
        read_only=True, allow_null=True, help_text="The earliest of the counted missed fires."
    )
    last_run = serializers.SerializerMethodField()
    version = serializers.IntegerField(read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    created_at = UtcDateTimeField(read_only=True)
    updated_at = UtcDateTimeField(read_only=True)

    FIELD_ORDER = (
        "id",
        "name",
        "description",
        *SCHEDULE_FIELDS,
        "target_kind",
        "url",
        "payload",
        "method",
        "body_mode",
        "headers",
        "header_names",
        "auth_kind",
        "auth_token",
        "auth_username",
        "auth_password",
        "tags",
    )

    def get_fields(self):
        # Declared fields of the schedule mixin would come first; read like the job's field table.
        fields = super().get_fields()
        first = {name: fields.pop(name) for name in self.FIELD_ORDER}
        return {**first, **fields}

    @extend_schema_field(LastRunSerializer(allow_null=True))
    def get_last_run(self, job: Job):
        # The newest attempted run (runs/last_run.py), as the admin's "Last run".
        known = self.context.get("last_runs")
        run = known.get(job.pk) if known is not None else last_runs([job.pk]).get(job.pk)
        if run is None:
            return None
        return LastRunSerializer(run).data

    def validate_url(self, value):
        if value:
            try:
                check_url(
                    value,
                    **configured_rule(),
                    # The view looked the request's host names up before
                    # its transaction (jobs/lookups.py); a bulk create, each
                    # name once for all its items.
                    resolve=self.context["resolve"],
                )
            except UnsafeTargetError as exc:
                raise serializers.ValidationError(str(exc)) from None
        return value

    def validate(self, attrs):
        job: Job | None = self.instance
        merged: dict[str, Any] = {
            name: attrs[name] if name in attrs else getattr(job, name, None)
            for name in ("name", "target_kind", "url", *SCHEDULE_FIELDS)
        }
        errors: dict[str, list[str]] = {}
        if any(name in attrs for name in SCHEDULE_FIELDS) or job is None:
            errors.update(
                schedule_errors(
                    merged, created_at=(job.created_at if job else None) or self.context["now"]
                )
            )
        if merged["target_kind"] == TargetKind.WEBHOOK and not merged["url"]:
            errors["url"] = ["A webhook job needs a URL."]
        if "name" in attrs and self._name_taken(attrs["name"], job):
            errors["name"] = ["You already have a job with this name."]
        refusal = self._interval_refusal(attrs, job)
        if refusal and "interval_seconds" not in errors:
            errors["interval_seconds"] = [refusal]
        errors.update(self._settle_request(attrs, job))
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def _settle_request(self, attrs: dict[str, Any], job: Job | None) -> dict[str, list[str]]:
        """The method, body mode, headers and authentication
        (jobs/http_options.py): ``attrs`` get the model's values in place of
        the secrets sent. Returns the errors by field."""
        errors: dict[str, list[str]] = {}
        method = attrs.get("method", job.method if job else HttpMethod.POST)
        if "body_mode" not in attrs:
            if job is None or not self.partial:
                attrs["body_mode"] = http_options.natural_body(method)
            elif "method" in attrs and http_options.body_problem(method, job.body_mode):
                attrs["body_mode"] = BodyMode.NONE
        problem = http_options.body_problem(
            method, attrs.get("body_mode", getattr(job, "body_mode", ""))
        )
        if problem:
            errors["body_mode"] = [problem]
        auth_kind = attrs.get("auth_kind", job.auth_kind if job else AuthKind.NONE)
        sent = {
            name: attrs.pop(name)
            for name in ("headers", *http_options.CREDENTIAL_FIELDS)
            if name in attrs
        }
        values, problems = http_options.settle(http_options.Stored.of(job), auth_kind, sent)
        attrs.update(values)
        errors.update({name: [message] for name, message in problems.items()})
        return errors

    def _interval_refusal(self, attrs: dict[str, Any], job: Job | None) -> str | None:
        """The owner's minimum interval (jobs/quotas.py), for an interval this
        request sets: a job made before the limit keeps its interval through
        edits that do not change it. A create's view reads the owner's limits
        once and passes them as ``limits``, once for a whole bulk create."""
        interval = attrs.get("interval_seconds")
        if interval is None or (job is not None and interval == job.interval_seconds):
            return None
        limits = self.context.get("limits")
        if limits is None:
            limits = quotas.limits_for(job.owner if job is not None else self.context["owner"])
        return quotas.interval_refusal(limits, interval)

    def _name_taken(self, name: str, job: Job | None) -> bool:
        taken = self.context.get("taken_names")
        if taken is not None and job is None:
            # A create looked up every name of its request in one query.
            return name in taken
        owner_id = job.owner_id if job else self.context["owner"].pk
        return Job.name_taken(owner_id, name, other_than=job.pk if job else None)


@extend_schema_serializer(description="The job as saved, with its schedule's warnings.")
class JobSavedSerializer(JobSerializer):
    """The answer to a save (create, PUT, PATCH): the job and its schedule's warnings."""

    warnings = warnings_field()


@extend_schema_serializer(
    description="The job as created, with its schedule's warnings and its secret, shown once."
)
class JobCreatedSerializer(JobSavedSerializer):
    """The create answer: also the secret in plain text, shown this once."""

    secret = serializers.CharField(
        read_only=True, help_text="whsec_...: shown only in this answer and on rotation."
    )


class PauseSerializer(StrictSerializer):
    note = StrictCharField(max_length=500, allow_blank=True, default="")
    resume_at = AwareDateTimeField(
        allow_null=True, default=None, help_text="The job resumes by itself at this time."
    )

    def validate_resume_at(self, value):
        if value is not None and value <= self.context["now"]:
            raise serializers.ValidationError("Must be in the future.")
        return value


class ResumeSerializer(StrictSerializer):
    catch_up = StrictBooleanField(
        default=False, help_text="Run the last max_catchup fires that fell inside the pause."
    )
    dry_run = StrictBooleanField(default=False, help_text="Answer the plan; change nothing.")


class ResumePlanSerializer(serializers.Serializer):
    catch_up = serializers.ListField(child=serializers.DateTimeField())
    next_fire_at = serializers.DateTimeField(allow_null=True)
    created = serializers.IntegerField()
    dry_run = serializers.BooleanField()


class ResumedJobSerializer(JobSerializer):
    resume = ResumePlanSerializer(read_only=True)


class BackfillSerializer(StrictSerializer):
    start = AwareDateTimeField()
    end = AwareDateTimeField()
    dry_run = StrictBooleanField(default=False)

    def validate(self, attrs):
        if attrs["start"] >= attrs["end"]:
            raise serializers.ValidationError({"end": ["Must be after start."]})
        if attrs["end"] > self.context["now"]:
            raise serializers.ValidationError(
                {"end": ["Must not be in the future: backfill is for past windows."]}
            )
        return attrs


class BackfillResultSerializer(serializers.Serializer):
    slots = serializers.ListField(child=serializers.DateTimeField())
    created = serializers.IntegerField()


class SecretSerializer(serializers.Serializer):
    secret = serializers.CharField()
    previous_secret_until = serializers.DateTimeField(
        help_text="Until then deliveries are signed with the old secret too."
    )


class PreviewQuerySerializer(serializers.Serializer):
    """Query parameters: unknown ones are ignored (cache-busters, tracking tags)."""

    count = serializers.IntegerField(min_value=1, max_value=MAX_PREVIEW, default=5)
    after = AwareDateTimeField(required=False)


@extend_schema_serializer(
    examples=[
        OpenApiExample(
            "Weekdays at 09:00 in New York",
            request_only=True,
            value={"cron": "0 9 * * 1-5", "timezone": "America/New_York", "count": 3},
        )
    ]
)
class SchedulePreviewSerializer(ScheduleFieldsMixin, StrictSerializer):
    after = AwareDateTimeField(required=False, help_text="Default: now.")
    count = StrictIntegerField(min_value=1, max_value=MAX_PREVIEW, default=5)

    def validate(self, attrs):
        errors = schedule_errors(attrs, created_at=self.context["now"])
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class FiresSerializer(serializers.Serializer):
    fires = serializers.ListField(child=serializers.DateTimeField())
    warnings = warnings_field()


class SchedulePreviewAnswerSerializer(FiresSerializer):
    """The ad hoc preview's answer: what the admin's job form shows as you type."""

    description = serializers.CharField(help_text="The schedule in words.")
    local_fires = serializers.ListField(
        child=serializers.CharField(),
        help_text="The same fires in the schedule's time zone, with their UTC offset.",
    )


class JobEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", read_only=True, allow_null=True)
    changes = serializers.JSONField(read_only=True)

    class Meta:
        model = JobEvent
        fields = ["id", "action", "channel", "actor", "changes", "created_at"]
        read_only_fields = fields
