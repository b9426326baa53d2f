"""API representations of runs and attempts, and the pull-worker bodies."""

from __future__ import annotations

from rest_framework import serializers

from core.api_fields import (
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
    StrictSerializer,
)
from runs.models import MAX_RESPONSE_CHARS, Attempt, Run, RunKind, RunState

MAX_WORKER_NAME = 100


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attempt
        fields = [
            "number",
            "worker",
            "started_at",
            "finished_at",
            "outcome",
            "status_code",
            "duration_ms",
            "error",
            "response",
        ]
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    job_name = serializers.CharField(source="job.name", read_only=True)

    class Meta:
        model = Run
        fields = [
            "id",
            "job",
            "job_name",
            "scheduled_at",
            "kind",
            "state",
            "reason",
            "attempt",
            "max_attempts",
            "available_at",
            "lease_owner",
            "lease_until",
            "created_at",
            "started_at",
            "finished_at",
            "lag_seconds",
            "last_status_code",
            "last_error",
            "last_response",
            "fires",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "fires": {
                "help_text": (
                    "How many of the job's fires this run stands for: 1, except for the"
                    " skipped run of a parked job (an interval job under overlap `skip` whose"
                    " run was still active), which stands for its own fire and each one an"
                    " interval later until that run ended: their count, or null while the"
                    " job is still parked."
                )
            },
            "reason": {
                "help_text": (
                    "Why the run never ran, or ended as it did: `past grace` and `over catch-up"
                    " cap` (a misfire), `no dispatcher` (missed: no dispatcher reached the fire"
                    " before the job's next one came due, and the first fire of that backlog"
                    " held it back), `overlap` (skipped: an earlier run was running or"
                    " waiting), `paused`, `deleted`, `target changed`, and for a failed run"
                    " `permanent error`, `attempts exhausted` or `lease expired on the last"
                    " attempt`. Empty otherwise."
                )
            },
        }


class RunDetailSerializer(RunSerializer):
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "attempts"]
        read_only_fields = fields


class RunFilterSerializer(serializers.Serializer):
    """Query parameters of the run lists. Unknown parameters are ignored, as
    query strings pick up cache-busters and tracking tags on the way."""

    job = serializers.UUIDField(required=False)
    state = serializers.ChoiceField(choices=RunState.choices, required=False)
    kind = serializers.ChoiceField(choices=RunKind.choices, required=False)
    late = serializers.BooleanField(required=False)


class WorkerNameField(StrictCharField):
    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", MAX_WORKER_NAME)
        kwargs.setdefault("help_text", "The pull worker's name, shown as the lease owner.")
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not value.isprintable():
            raise serializers.ValidationError("Must be printable characters only.")
        return value


class ClaimSerializer(StrictSerializer):
    job = serializers.UUIDField(required=False, allow_null=True, default=None)
    limit = StrictIntegerField(min_value=1, max_value=100, default=1)
    lease_seconds = StrictIntegerField(min_value=5, max_value=3600, default=30)
    worker = WorkerNameField()
    wait_seconds = StrictIntegerField(
        min_value=0,
        max_value=30,
        default=0,
        help_text=(
            "With nothing claimable, wait up to this many seconds for a run to become"
            " claimable, and answer it as soon as it does; an empty list when the wait ends."
            " 0: answer at once."
        ),
    )


class ClaimedRunSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="run_id")
    job = serializers.UUIDField(source="job_id")
    job_name = serializers.CharField()
    scheduled_at = serializers.DateTimeField()
    kind = serializers.ChoiceField(choices=RunKind.choices)
    attempt = serializers.IntegerField(help_text="Send it back with heartbeat and complete.")
    lease_until = serializers.DateTimeField()
    payload = serializers.DictField()


class HeartbeatSerializer(StrictSerializer):
    attempt = StrictIntegerField(min_value=1)
    lease_seconds = StrictIntegerField(
        min_value=5,
        max_value=3600,
        required=False,
        help_text="Default: the lease length given at claim.",
    )
    worker = WorkerNameField(required=False, help_text="Optional: the name given at claim.")


class LeaseSerializer(serializers.Serializer):
    lease_until = serializers.DateTimeField()


class CompleteSerializer(StrictSerializer):
    attempt = StrictIntegerField(min_value=1)
    status = StrictChoiceField(choices=[RunState.SUCCEEDED, RunState.FAILED])
    error = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="What went wrong, for status failed; kept as the run's last_error "
        "(the first 2,000 characters). Must be empty for status succeeded.",
    )
    response = StrictCharField(
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="The work's answer or output, for either status; kept as the run's "
        f"last_response (the first {MAX_RESPONSE_CHARS:,} characters).",
    )
    retryable = StrictBooleanField(
        default=True,
        help_text="For status failed: retry with backoff while attempts remain (default), "
        "or fail the run now (false).",
    )
    worker = WorkerNameField(required=False, help_text="Optional: the name given at claim.")

    def validate(self, attrs):
        if attrs["status"] == RunState.SUCCEEDED and attrs["error"]:
            raise serializers.ValidationError(
                {"error": ["A succeeded attempt has no error: send its output as response."]}
            )
        return attrs
