"""Runs (one row per fire) and their attempts (docs/concepts/runs-and-retries.md; their
fields: docs/reference/api.md "Run").

A run's id is the fire's identity: every delivery attempt carries it as
``webhook-id`` and ``Idempotency-Key``, and every path that inserts runs
derives it from the fire (runs/identity.py) instead of drawing it at random.
State changes on the hot path (claim, heartbeat, complete) are guarded
set-based SQL in ``runs/leases.py`` and ``runs/outcomes.py``; this module
holds the rows, named filters, and the operator verbs.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from django.db import models, transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from core.db import db_now
from jobs import quotas
from jobs.schedules import jitter_offset
from runs import identity, notify, partitions

if TYPE_CHECKING:
    from jobs.models import Job

MAX_ERROR_CHARS = 2000
# What a run keeps of the receiver's answer (a webhook's response body, a pull
# worker's ``response``): an excerpt, so a chatty receiver cannot grow the table.
MAX_RESPONSE_CHARS = 500


class RunState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    RETRYING = "retrying", "Retrying"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    MISSED = "missed", "Missed"
    SKIPPED = "skipped", "Skipped"
    CANCELLED = "cancelled", "Cancelled"


WAITING_STATES = (RunState.PENDING, RunState.RETRYING)
ACTIVE_STATES = (RunState.PENDING, RunState.RUNNING, RunState.RETRYING)
TERMINAL_STATES = (
    RunState.SUCCEEDED,
    RunState.FAILED,
    RunState.MISSED,
    RunState.SKIPPED,
    RunState.CANCELLED,
)


class RunKind(models.TextChoices):
    SCHEDULED = "scheduled", "Scheduled"
    CATCH_UP = "catch_up", "Catch-up"
    BACKFILL = "backfill", "Backfill"
    MANUAL = "manual", "Manual"
    # The admin's "Send test delivery": one attempt, outside the failure streak.
    TEST = "test", "Test delivery"


# Runs made by hand (a trigger, a test delivery): they share the owner's
# triggers per minute.
HAND_MADE_KINDS = (RunKind.MANUAL, RunKind.TEST)


class Reason:
    """Why a run never ran, or why it ended the way it did."""

    PAST_GRACE = "past grace"
    OVER_CATCHUP_CAP = "over catch-up cap"
    OVERLAP = "overlap"
    # A missed fire of a backlog that no dispatcher reached in time (runs/planning.py).
    NO_DISPATCHER = "no dispatcher"
    PAUSED = "paused"
    DELETED = "deleted"
    LEASE_EXHAUSTED = "lease expired on the last attempt"
    TARGET_CHANGED = "target changed"


class RetryNotAllowed(Exception):
    pass


# The columns every insert of a new run writes, in this order. The set-based
# inserts (dispatch/queries.py INSERT_RUNS_AND_ADVANCE and
# DISPATCH_SIMPLE_INTERVALS, ops/bench/) format RUN_COLUMNS_SQL into their
# ``INSERT INTO runs_run (...)`` and give the values in this order; the ORM's
# inserts build each row with Run.for_job(), which sets every one of them.
# A column added to runs is added here, and then given its value in each of
# those: a statement left without one fails (more target columns than
# values). The other columns are NULL or their default until a claim, a
# heartbeat or a completion writes them.
RUN_COLUMNS = (
    "id",
    "job_id",
    "scheduled_at",
    "kind",
    "state",
    "reason",
    "attempt",
    "max_attempts",
    "available_at",
    "lease_owner",
    "created_at",
    "finished_at",
    "last_error",
    "target_kind",
    "exclusive",
    "owner_id",
)
RUN_COLUMNS_SQL = ", ".join(RUN_COLUMNS)


# A run is late when it started this long after its scheduled time, or is
# still waiting this long after it became available (docs/guides/api.md "Lists").
# Jitter is part of the lag by definition, the first attempt's start minus
# scheduled_at (docs/concepts/schedules.md "Jitter").
LATE_AFTER = dt.timedelta(seconds=5)


class RunQuerySet(models.QuerySet["Run"]):
    def late(self, late: bool = True) -> RunQuerySet:
        """The late runs (LATE_AFTER), as the admin's "Late" filter and the
        API's ``?late=true`` both show them, or (``late=False``) the others.
        A backfill is never late: its fires are in the past on purpose, and
        it may be spread out over time."""
        condition = ~Q(kind=RunKind.BACKFILL) & (
            Q(lag_seconds__gt=LATE_AFTER.total_seconds())
            | Q(state=RunState.PENDING, available_at__lt=Now() - LATE_AFTER)
        )
        return self.filter(condition) if late else self.exclude(condition)

    def for_owner(self, user) -> RunQuerySet:
        """The one owner filter every run endpoint and admin page uses."""
        if user.is_superuser:
            return self
        return self.filter(job__owner=user)

    def manual_since(self, job_id, since: dt.datetime) -> list[dt.datetime]:
        """When ``job_id``'s manual runs and test deliveries since ``since``
        were made: such a run is scheduled at its trigger's time, so the (job,
        scheduled_at) index and the day partitions find them."""
        return list(
            self.filter(
                job_id=job_id, kind__in=HAND_MADE_KINDS, scheduled_at__gte=since
            ).values_list("scheduled_at", flat=True)
        )

    def cancel_waiting(self, *, job_id, reason: str, now: dt.datetime) -> int:
        """pending/retrying -> cancelled. A running run is left to finish its
        attempt; its retry, if any, is cancelled when it completes."""
        return self.filter(job_id=job_id, state__in=WAITING_STATES).update(
            state=RunState.CANCELLED,
            reason=reason,
            finished_at=now,
            available_at=None,
        )

    def create_planned(
        self, job: Job, rows: Iterable[tuple[dt.datetime, str, str, str]], *, now: dt.datetime
    ) -> int:
        """Insert the runs a plan decided, as ``(scheduled_at, kind, state,
        reason)``: pending ones wait for a worker, the others are recorded as
        finished at ``now``. Fires that already have a run are left alone.
        Each run's id is its fire's (runs/identity.py), as the dispatcher's."""
        offset = dt.timedelta(seconds=jitter_offset(job.pk, job.jitter_seconds))
        objs = [
            self.model.for_job(
                job,
                id=identity.fire_id(job.pk, fire),
                scheduled_at=fire,
                kind=kind,
                state=state,
                reason=reason,
                available_at=fire + offset if state == RunState.PENDING else None,
                finished_at=None if state == RunState.PENDING else now,
            )
            for fire, kind, state, reason in rows
        ]
        if not objs:
            return 0
        self.bulk_create(objs, ignore_conflicts=True)
        return len(objs)

    def create_for_fires(
        self,
        job: Job,
        fires: Iterable[dt.datetime],
        *,
        kind: str,
        spread: Spread | None = None,
    ) -> int:
        """Insert pending runs for ``fires``; fires that already have a run are
        left alone (the unique fire key turns a duplicate into a no-op). Each
        run's id is its fire's, so a fire whose run was pruned (or lost) comes
        back under the id it was first delivered with.

        Each run is available at its fire (plus the job's jitter); with
        ``spread``, no earlier than its place in the spread (a backfill's
        runs trickle out instead of all being due at once)."""
        offset = dt.timedelta(seconds=jitter_offset(job.pk, job.jitter_seconds))
        ordered = sorted(fires)
        rows = [
            self.model.for_job(
                job,
                id=identity.fire_id(job.pk, fire),
                scheduled_at=fire,
                kind=kind,
                available_at=fire + offset if spread is None else spread.at(n, fire + offset),
            )
            for n, fire in enumerate(ordered)
        ]
        if not rows:
            return 0
        before = self.filter(job=job).count()
        self.bulk_create(rows, ignore_conflicts=True)
        return self.filter(job=job).count() - before

    def spread_after(self, job: Job, *, now: dt.datetime, rate: float) -> Spread:
        """Where a new backfill of ``job`` starts its spread: now, or right
        after the last run of an earlier backfill still waiting, so that two
        backfills in a row together keep to ``rate``."""
        last = self.filter(job=job, kind=RunKind.BACKFILL, state__in=WAITING_STATES).aggregate(
            last=models.Max("available_at")
        )["last"]
        step = dt.timedelta(seconds=1 / rate)
        start = now if last is None or last + step <= now else last + step
        return Spread(start=start, step=step)


@dataclass(frozen=True)
class Spread:
    """Runs made available one ``step`` apart from ``start`` (a backfill at
    PUNCTUAL_BACKFILL_RATE runs per second), in fire order."""

    start: dt.datetime
    step: dt.timedelta

    def at(self, n: int, earliest: dt.datetime) -> dt.datetime:
        """The n-th run's available_at: its place in the spread, or its own
        ``earliest`` (a fire still in the future) if that is later."""
        return max(earliest, self.start + n * self.step)


class Run(models.Model):
    # The table is partitioned by day on scheduled_at (runs/partitions.py):
    # its primary key in the database is (id, scheduled_at). Django's pk is
    # id alone, which is unique anyway: it is the fire's uuid5.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No database-level foreign key: on the dispatcher's insert path the
    # per-row referential check (and the KEY SHARE lock it takes on the job
    # row) cost a quarter of the throughput (measured: 18.6k -> 25.5k fires/s).
    # Runs are only ever created for a job row that exists (the dispatcher has
    # it locked), jobs are soft-deleted, and deleting an owner cascades through
    # the ORM. The (job, scheduled_at) unique index also serves job lookups.
    job = models.ForeignKey(
        "jobs.Job",
        on_delete=models.CASCADE,
        related_name="runs",
        db_constraint=False,
        db_index=False,
    )
    scheduled_at = models.DateTimeField()
    kind = models.CharField(max_length=10, choices=RunKind.choices, default=RunKind.SCHEDULED)
    state = models.CharField(max_length=10, choices=RunState.choices, default=RunState.PENDING)
    reason = models.CharField(max_length=100, blank=True, default="")

    # attempt counts the attempts started; it is also the fencing token.
    attempt = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=3)
    available_at = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_seconds = models.PositiveIntegerField(null=True, blank=True)
    attempt_started_at = models.DateTimeField(null=True, blank=True)
    # A heartbeat can never push lease_until past this: a wedged worker that
    # keeps heartbeating still loses the run at timeout_seconds + grace.
    deadline_at = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lag_seconds = models.FloatField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(max_length=MAX_ERROR_CHARS, blank=True, default="")
    # The receiver's answer to the last attempt, success or not (last_error
    # says what went wrong, and is empty on success). A database default too:
    # the set-based inserts name only RUN_COLUMNS.
    last_response = models.TextField(
        max_length=MAX_RESPONSE_CHARS, blank=True, default="", db_default=""
    )

    # Copied from the job at fire time, so the claim queries need no join and
    # the partial indexes below can name them.
    target_kind = models.CharField(max_length=10, default="webhook")
    exclusive = models.BooleanField(default=True)  # overlap policy skip/queue
    # The job's owner (a job's owner never changes), so that the claim can
    # share a batch between owners with index probes (runs/leases.py
    # FAIR_CLAIM). NOT NULL in the database: an insert that leaves it out gets
    # it from the job (the trigger run_owner_from_job, migration 0007).
    owner_id = models.BigIntegerField(null=True, blank=True, editable=False)

    # How many of the job's fires this row stands for: 1, but for the
    # ``skipped`` run of a parked job (jobs/models.py Job.parked_since), which
    # stands for its first declined fire and every one after it, one interval
    # apart, until the run it waited for ended: NULL while the job is still
    # parked (every fire from scheduled_at on), then their count
    # (docs/concepts/misfire-and-overlap.md "Parked while its run is active").
    # A database default, so the set-based inserts need not name it.
    fires = models.PositiveIntegerField(null=True, default=1, db_default=1, editable=False)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-scheduled_at"]
        constraints = [
            # One fire, one run (docs/design/guarantees.md "One fire, one run"): a
            # second dispatcher's insert of the same fire becomes ON CONFLICT DO NOTHING.
            # It includes scheduled_at, the partition key (runs/partitions.py),
            # so it holds across the daily partitions.
            models.UniqueConstraint(fields=["job", "scheduled_at"], name="run_one_per_fire"),
            # Under overlap skip/queue at most one run of a job is running: a
            # partial unique index cannot say it across partitions, so the
            # trigger run_one_running_per_exclusive_job does (migration 0006),
            # failing the write with a unique violation of that name.
        ]
        indexes = [
            # The rows that stand for more than one fire (Run.fires, a parked
            # job's skipped run): the auditor finds those that began before
            # its window (ops/audit.py). Tiny: one row per parking.
            models.Index(
                fields=["job", "scheduled_at"],
                condition=~Q(fires=1),
                name="run_fire_range_idx",
            ),
            # The worker's claim query (runs/leases.py CLAIM_WAITING): due waiting
            # webhook runs in available_at order. Only waiting rows are in it,
            # so it stays tiny however much history the table keeps.
            models.Index(
                fields=["available_at"],
                condition=Q(state__in=["pending", "retrying"], target_kind="webhook"),
                name="run_claim_webhook_idx",
            ),
            # The worker's fair claim (runs/leases.py FAIR_CLAIM, WAITING_OWNERS):
            # the owners with waiting webhook runs, and each one's runs in
            # available_at order.
            models.Index(
                fields=["owner_id", "available_at"],
                condition=Q(state__in=["pending", "retrying"], target_kind="webhook"),
                name="run_claim_owner_idx",
            ),
            # The pull API's claim for one job of the caller.
            models.Index(
                fields=["job", "available_at"],
                condition=Q(state__in=["pending", "retrying"], target_kind="pull"),
                name="run_claim_pull_idx",
            ),
            # The pull API's claim over all of the caller's jobs (runs/leases.py
            # PULL_SCOPE without a job), in its order.
            models.Index(
                fields=["owner_id", "available_at"],
                condition=Q(state__in=["pending", "retrying"], target_kind="pull"),
                name="run_claim_pull_owner_idx",
            ),
            # The expired-lease claim (runs/leases.py CLAIM_EXPIRED): running runs
            # with an attempt left, in the order it takes them over. Not
            # lease_until, which heartbeats rewrite: it is in no index, so that
            # they stay HOT updates. "attempt < max_attempts" is what the claim
            # asks and what keeps this index away from the claims' overlap probe
            # (ITS_TURN: "is another run of this job running?", which does not
            # ask it): with the bare predicate state = 'running', the planner
            # took this index for that probe whenever its statistics were older
            # than the runs in flight, and each probe walked every running run
            # (migration 0013).
            models.Index(
                fields=["target_kind", "scheduled_at"],
                condition=Q(state="running", attempt__lt=F("max_attempts")),
                name="run_takeover_idx",
            ),
            # The claims' overlap probe (runs/leases.py ITS_TURN: "is another
            # run of this job running?"), one job's running runs. Through
            # run_active_idx the planner expects the job's whole day of runs
            # (job_id's n_distinct, runs/partitions.py), and PostgreSQL 17
            # then chose to read the day's partition whole for each probe
            # beside a few thousand waiting runs (migration 0017).
            models.Index(
                fields=["job"],
                condition=Q(state="running"),
                name="run_running_job_idx",
            ),
            # Its counterpart for the dispatcher's housekeeping (runs/outcomes.py
            # FAIL_EXHAUSTED): running runs on their last attempt, the ones whose
            # lapsed lease ends them failed. A handful at most, where the active
            # runs it would otherwise walk are the whole backlog.
            models.Index(
                fields=["scheduled_at"],
                condition=Q(state="running", attempt__gte=F("max_attempts")),
                name="run_exhausted_idx",
            ),
            # Overlap checks in the dispatcher and the claim's "an earlier run
            # of this job is still active" test.
            # lease_until is deliberately in no index, so heartbeats stay HOT.
            models.Index(
                fields=["job", "scheduled_at"],
                condition=Q(state__in=["pending", "running", "retrying"]),
                name="run_active_idx",
            ),
            # Run lists (newest first) and pruning by age.
            models.Index(fields=["scheduled_at"], name="run_scheduled_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} @ {self.scheduled_at.isoformat()}"

    @classmethod
    def for_job(
        cls,
        job: Job,
        *,
        id: uuid.UUID,
        scheduled_at: dt.datetime,
        kind: str,
        available_at: dt.datetime | None,
        state: str = RunState.PENDING,
        reason: str = "",
        finished_at: dt.datetime | None = None,
        max_attempts: int | None = None,
    ) -> Self:
        """A new, unsaved run of ``job``, for the ORM's inserts: each of
        RUN_COLUMNS set, in its order, the job's copies taken as the
        set-based inserts take them (its max_attempts unless given, its
        target kind, its overlap rule as ``exclusive``, its owner), but
        ``created_at``, which the insert sets (``auto_now_add``)."""
        return cls(
            id=id,
            job=job,
            scheduled_at=scheduled_at,
            kind=kind,
            state=state,
            reason=reason,
            attempt=0,
            max_attempts=job.max_attempts if max_attempts is None else max_attempts,
            available_at=available_at,
            lease_owner="",
            finished_at=finished_at,
            last_error="",
            target_kind=job.target_kind,
            exclusive=job.overlap_policy != "allow",
            owner_id=job.owner_id,
        )

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @transaction.atomic
    def retry(self, *, actor=None, channel: str = "api") -> Run:
        """Operator retry of a failed or missed run: back to pending with a
        fresh attempt budget. Same id, because it is the same fire.

        ``attempt`` keeps counting up (it is the fencing token), so the budget
        is extended instead of reset.

        A retry counts against the owner's triggers per minute, with the
        job's manual runs and test deliveries (jobs/quotas.py): each one
        delivers the fire again, so a loop of retries could otherwise send a
        receiver what the limit keeps manual runs from sending. It is counted
        under the job's row lock, as a trigger is, so that concurrent retries
        and triggers cannot pass the limit together; over it, the retry is
        refused (``LimitExceeded``) and nothing is written.
        """
        job = self.job.locked()
        if job is None:
            raise RetryNotAllowed("the run's job was deleted")
        now = db_now()
        updated = Run.objects.filter(
            pk=self.pk, state__in=[RunState.FAILED, RunState.MISSED]
        ).update(
            state=RunState.PENDING,
            reason="",
            available_at=now,
            finished_at=None,
            lease_owner="",
            lease_until=None,
            max_attempts=self.attempt + job.max_attempts,
        )
        # Guard: two operators retrying at once, or a run that changed state
        # since the page was loaded; only one retry may win.
        if updated != 1:
            raise RetryNotAllowed(
                f"only failed or missed runs can be retried (run is {self.state})"
            )
        # After the guard, so that a run that cannot be retried is a conflict
        # whatever the count; a refusal here rolls the update back.
        since = now - quotas.TRIGGER_WINDOW
        quotas.spend_retry(job.owner, job.pk, Run.objects.manual_since(job.pk, since), now)
        # Waiting again, and maybe older than the active floor that bounds
        # the claims: lowered in this transaction, so the run is claimable
        # as soon as it commits (runs/partitions.py "The active floor").
        partitions.lower_active_floor(self.scheduled_at)
        self.refresh_from_db()
        self.job.record_event(
            "run_retried", actor=actor, channel=channel, changes={"run": str(self.pk)}
        )
        notify.runs_claimable("retry")
        return self


class Attempt(models.Model):
    """One delivery attempt of a run (or one pull-worker lease)."""

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed (retryable)"
        PERMANENT = "permanent", "Failed (permanent)"
        LEASE_EXPIRED = "lease_expired", "Lease expired"
        # Cut short by a worker's SIGTERM drain deadline; the run was released
        # and this attempt did not count against max_attempts. Or lost with its
        # worker while the job was paused or deleted: the run was cancelled.
        INTERRUPTED = "interrupted", "Interrupted (worker stopped)"

    # No foreign key in the database: one into the partitioned runs table
    # would have to name (run_id, scheduled_at), and would make dropping a
    # day's partitions check every attempt. Attempts are written only by
    # statements that read their run (runs/leases.py, runs/outcomes.py), and
    # deleting runs through the ORM still cascades to them.
    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="attempts",
        db_constraint=False,
        db_index=False,
    )
    # A copy of the run's, the partition key: a day's attempts live in the
    # same day's partition as their runs, and are dropped with them.
    scheduled_at = models.DateTimeField()
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=15, choices=Outcome.choices)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    # The receiver's answer to this attempt (see Run.last_response).
    response = models.TextField(
        max_length=MAX_RESPONSE_CHARS, blank=True, default="", db_default=""
    )

    class Meta:
        ordering = ["run", "number"]
        constraints = [
            # (run, number) unique; scheduled_at follows from the run, and a
            # unique key of a partitioned table must include it.
            models.UniqueConstraint(
                fields=["run", "number", "scheduled_at"], name="attempt_unique_number"
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.run_id}: {self.outcome}"

    def save(self, *args, **kwargs):
        if self.scheduled_at is None and self.run_id is not None:
            self.scheduled_at = self.run.scheduled_at
        super().save(*args, **kwargs)


class DeliveryStat(models.Model):
    """Delivery counters behind ``punctual_deliveries_total`` and the
    ``punctual_delivery_seconds`` histogram (runs/stats.py writes them,
    ops/metrics.py reads them).

    Workers deliver; web processes serve /metrics. Neither can see the other's
    memory, so the workers add to these rows, one upsert per completed batch.
    Each row counts the attempts of one outcome that fell into one histogram
    bucket. ``shard`` spreads the writers over a few rows per bucket, so two
    workers completing at once rarely wait on the same row lock. Rows are never
    deleted: the table stays at most shards x outcomes x buckets rows, and the
    counters only go up, as Prometheus expects.
    """

    shard = models.PositiveSmallIntegerField()
    outcome = models.CharField(max_length=15)
    # Index into stats.BUCKETS of the smallest bound >= the duration;
    # len(BUCKETS) means above the largest bound (+Inf), -1 means no duration
    # was measured (counted in the total, not in the histogram).
    bucket = models.SmallIntegerField()
    deliveries = models.BigIntegerField(default=0)
    duration_ms = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["shard", "outcome", "bucket"], name="deliverystat_one_row_per_counter"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} bucket {self.bucket}: {self.deliveries}"
