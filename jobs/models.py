"""Jobs: what to run, when, and where to deliver it (docs/guides/api.md "Input rules").

The schedule math lives in ``jobs.schedules`` (pure); this module holds the
rows and the domain verbs that touch only the job: reschedule, rotate_secret.
Jobs are made by one verb, ``create_jobs`` (jobs/creation.py), on top of
``Job.create_many``'s statement.
The verbs that also create or cancel runs (pause, resume, trigger, backfill,
soft_delete) are in runs/job_verbs.py, since jobs sits below runs. Views, the
admin and the API call these verbs; none of them update job rows behind the
model's back.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import connection, models, transaction
from django.db.models import F, Q

from core import strict_json
from core.db import bound_cursor, db_now, rows_insert, rows_inserted
from jobs import changes, crypto, history
from jobs.http_options import MAX_HEADER_NAME, AuthKind, BodyMode, HttpMethod
from jobs.limits import MAX_LENGTHS, OWNER_LIMITS, RANGES
from jobs.schedules import Schedule
from jobs.tags import MAX_TAG_LENGTH, MAX_TAGS

ROTATION_OVERLAP = dt.timedelta(hours=24)


class TargetKind(models.TextChoices):
    WEBHOOK = "webhook", "Webhook"
    PULL = "pull", "Pull queue"


class MisfirePolicy(models.TextChoices):
    SKIP = "skip", "Skip (record as missed)"
    CATCH_UP = "catch_up", "Catch up (run the most recent)"


class OverlapPolicy(models.TextChoices):
    SKIP = "skip", "Skip while one is active"
    QUEUE = "queue", "Queue one"
    ALLOW = "allow", "Allow side by side"


class JobState(models.TextChoices):
    ACTIVE = "active", "Active"
    PAUSED = "paused", "Paused"


class JobStatus(models.TextChoices):
    """What a job shows as (the API's ``state``, the admin's state filter):
    its stored state, or ``finished`` for an active job with no fire left to
    come (``next_fire_at`` NULL: its end_at is past, or its one-off fired).
    Finished is derived, never stored: the dispatcher's due index and the
    claims see an active job whose next fire is NULL, and never look at it."""

    ACTIVE = "active", "Active"
    PAUSED = "paused", "Paused"
    FINISHED = "finished", "Finished"


class Channel(models.TextChoices):
    ADMIN = "admin", "Admin"
    API = "api", "API"
    SYSTEM = "system", "System"


# Job.name_taken: the clash the unique index job_unique_name_per_owner would
# refuse, looked for before the insert so a create names it with its other errors.
NAME_TAKEN = """
    SELECT 1 FROM jobs_job
    WHERE owner_id = %s AND name = %s AND deleted_at IS NULL
      AND id IS DISTINCT FROM %s::uuid
    LIMIT 1
"""

# An owner's live jobs (migration 0011's triggers keep them counted in
# jobs_live_jobs), read under the owner's lock on that row, held until the
# transaction ends: the upsert waits for a concurrent create's or delete's
# lock, then reads the row as that one committed it (not as this statement's
# snapshot saw it), so two creates cannot both take an owner's last room.
# An owner's first create makes the row.
LIVE_JOBS_LOCKED = (
    "INSERT INTO jobs_live_jobs AS c (owner_id, live) VALUES (%(owner)s, 0)"
    " ON CONFLICT (owner_id) DO UPDATE SET live = c.live RETURNING live"
)


class JobQuerySet(models.QuerySet["Job"]):
    def live(self) -> JobQuerySet:
        """Jobs that have not been deleted (deleted jobs stay for their runs' sake)."""
        return self.filter(deleted_at__isnull=True)

    def for_owner(self, user) -> JobQuerySet:
        """The one owner filter every endpoint and admin page uses."""
        qs = self.live()
        if user.is_superuser:
            return qs
        return qs.filter(owner=user)

    def finished(self) -> JobQuerySet:
        """Active jobs with no fire left to come (JobStatus.FINISHED). A
        parked job has no next fire yet either, but fires again once its run
        ends."""
        return self.filter(
            state=JobState.ACTIVE, next_fire_at__isnull=True, parked_since__isnull=True
        )

    def shown_as(self, status: str) -> JobQuerySet:
        """The jobs that show as ``status`` (a JobStatus): the API's
        ``?state=`` and the admin's state filter."""
        if status == JobStatus.FINISHED:
            return self.finished()
        if status == JobStatus.ACTIVE:
            return self.filter(state=JobState.ACTIVE).exclude(
                next_fire_at__isnull=True, parked_since__isnull=True
            )
        return self.filter(state=status)

    def failing(self) -> JobQuerySet:
        return self.filter(consecutive_failures__gt=0)

    def tagged(self, tags: list[str]) -> JobQuerySet:
        """Jobs that carry every one of ``tags`` (``tags @> ARRAY[...]``, on
        the GIN index job_tags_idx, which holds the tagged jobs only: the
        "not untagged" condition is its predicate, which the planner must
        see to use it). The API's ``?tag=`` and the admin's tag filter both
        call this."""
        return self.filter(~Q(tags=[]), tags__contains=tags) if tags else self

    def search(self, text: str) -> JobQuerySet:
        """The jobs lists' search (the API's ``?search=``, the admin's search
        box): every word of ``text`` must appear, in any case, in the name,
        the URL or the description. The words of Django's admin search, in
        one place for both faces."""
        jobs = self
        for word in text.split():
            jobs = jobs.filter(
                Q(name__icontains=word) | Q(url__icontains=word) | Q(description__icontains=word)
            )
        return jobs


class PayloadField(models.JSONField):
    """A job's payload: read back at any depth (``strict_json.loads_stored``).

    New payloads are at most a few levels deep (docs/guides/api.md "Input rules"); one
    stored before that rule may be deeper than ``json.loads`` reads from a
    deep stack, and its job's pages must still open.
    """

    def from_db_value(self, value, expression, connection):
        if not isinstance(value, str):
            return value  # None, or a key's value already read by the driver
        try:
            return strict_json.loads_stored(value)
        except json.JSONDecodeError:
            return value  # as Django's JSONField does


class Job(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own (jobs/migrations/0018): every fire updates the
    # job's row in a new version that each index of the table takes an entry
    # for, and the owner's live jobs, which every owner's query asks for, are
    # in the unique (owner, name) index. Only deleting a user reads the table
    # whole, for its deleted jobs too.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jobs", db_index=False
    )
    # Every bound below comes from jobs/limits.py, which the admin form and
    # the API serializer read too.
    name = models.CharField(max_length=MAX_LENGTHS["name"])
    description = models.TextField(max_length=MAX_LENGTHS["description"], blank=True, default="")

    cron = models.CharField(max_length=MAX_LENGTHS["cron"], null=True, blank=True)
    interval_seconds = models.PositiveIntegerField(
        null=True, blank=True, validators=RANGES["interval_seconds"].validators()
    )
    timezone = models.CharField(max_length=MAX_LENGTHS["timezone"], default="UTC")
    start_at = models.DateTimeField(null=True, blank=True)
    # A one-off job's one fire, instead of a cron or an interval.
    run_at = models.DateTimeField(null=True, blank=True)
    # No fire after it. Once the last fire is planned, next_fire_at is NULL
    # and the job shows as finished (JobQuerySet.finished).
    end_at = models.DateTimeField(null=True, blank=True)

    target_kind = models.CharField(
        max_length=10, choices=TargetKind.choices, default=TargetKind.WEBHOOK
    )
    url = models.CharField(max_length=MAX_LENGTHS["url"], blank=True, default="")
    payload = PayloadField(default=dict, blank=True)
    # How the webhook is called (jobs/http_options.py has the rules). The
    # db_defaults: the bulk create's INSERT names its columns.
    method = models.CharField(
        max_length=6, choices=HttpMethod.choices, default=HttpMethod.POST, db_default="POST"
    )
    body_mode = models.CharField(
        max_length=10, choices=BodyMode.choices, default=BodyMode.ENVELOPE, db_default="envelope"
    )
    auth_kind = models.CharField(
        max_length=10, choices=AuthKind.choices, default=AuthKind.NONE, db_default="none"
    )
    # Fernet tokens (jobs/crypto.py) of the credentials and of the extra
    # headers' {name: value}; only the names are kept in the clear, to show.
    auth_encrypted = models.TextField(blank=True, default="", db_default="", editable=False)
    header_names = ArrayField(
        models.CharField(max_length=MAX_HEADER_NAME),
        default=list,
        blank=True,
        db_default=[],
        editable=False,
    )
    headers_encrypted = models.TextField(blank=True, default="", db_default="", editable=False)

    # Short labels to group and find jobs by (jobs/tags.py has the rule).
    tags = ArrayField(
        models.CharField(max_length=MAX_TAG_LENGTH), default=list, blank=True, db_default=[]
    )
    timeout_seconds = models.PositiveIntegerField(
        default=30, validators=RANGES["timeout_seconds"].validators()
    )
    max_attempts = models.PositiveIntegerField(
        default=3, validators=RANGES["max_attempts"].validators()
    )
    retry_backoff_seconds = models.PositiveIntegerField(
        default=10, validators=RANGES["retry_backoff_seconds"].validators()
    )

    misfire_policy = models.CharField(
        max_length=10, choices=MisfirePolicy.choices, default=MisfirePolicy.SKIP
    )
    max_catchup = models.PositiveIntegerField(
        default=3, validators=RANGES["max_catchup"].validators()
    )
    misfire_grace_seconds = models.PositiveIntegerField(
        default=60, validators=RANGES["misfire_grace_seconds"].validators()
    )
    overlap_policy = models.CharField(
        max_length=10, choices=OverlapPolicy.choices, default=OverlapPolicy.SKIP
    )
    jitter_seconds = models.PositiveIntegerField(
        default=0, validators=RANGES["jitter_seconds"].validators()
    )
    pause_after_failures = models.PositiveIntegerField(
        null=True, blank=True, validators=RANGES["pause_after_failures"].validators()
    )

    state = models.CharField(max_length=10, choices=JobState.choices, default=JobState.ACTIVE)
    pause_note = models.CharField(max_length=500, blank=True, default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    # Who paused it, by channel: "system" is an automatic pause (410 Gone, a
    # failure streak), which the admin labels apart from an owner's. Empty
    # while active.
    # (db_default: the bulk create's INSERT names its columns, this one not.)
    paused_by = models.CharField(
        max_length=10, choices=Channel.choices, blank=True, default="", db_default=""
    )
    # The system's reason for its pause, kept while the job stays paused: an
    # owner who pauses a job the system paused (a new note, a resume_at)
    # adds their note in pause_note, and paused_by stays "system". A resume
    # clears both (docs/concepts/pause-and-resume.md "Paused by the system").
    system_pause_note = models.CharField(
        max_length=500, blank=True, default="", db_default="", editable=False
    )
    resume_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    next_fire_at = models.DateTimeField(null=True, blank=True)
    # Parked (docs/concepts/misfire-and-overlap.md "Parked while its run is
    # active"): an interval job under overlap ``skip`` whose fire came due
    # while its run was active leaves the due set until that run ends. This is
    # the first fire it declined (its ``skipped`` run stands for every fire
    # from here on, runs/models.py Run.fires); next_fire_at is NULL meanwhile.
    # The end of the run (runs/migrations/0015, jobs_unpark_all) sets the next fire
    # and clears this. Never set for a job that is not active.
    parked_since = models.DateTimeField(null=True, blank=True, editable=False)
    # Fires past the recorded cap of a recovery (docs/concepts/misfire-and-overlap.md
    # "Misfires"):
    # counted, never listed. ``missed_since`` is the earliest of them.
    missed_count = models.PositiveBigIntegerField(default=0, db_default=0, editable=False)
    missed_since = models.DateTimeField(null=True, blank=True, editable=False)

    # Fernet tokens (jobs/crypto.py); the plain secret is never stored.
    secret_encrypted = models.TextField(editable=False)
    previous_secret_encrypted = models.TextField(blank=True, default="", editable=False)
    previous_secret_until = models.DateTimeField(null=True, blank=True, editable=False)

    version = models.PositiveIntegerField(default=1)
    # Set from the database clock as the row is inserted: what an interval
    # counts from when start_at is unset (jobs/schedules.py Schedule.for_job).
    created_at = models.DateTimeField(editable=False)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(cron__isnull=False, interval_seconds__isnull=True, run_at__isnull=True)
                    | Q(cron__isnull=True, interval_seconds__isnull=False, run_at__isnull=True)
                    | Q(cron__isnull=True, interval_seconds__isnull=True, run_at__isnull=False)
                ),
                name="job_exactly_one_schedule",
            ),
            # jobs/schedules.py end_problem and START_WITH_RUN_AT, whatever
            # writes the row.
            models.CheckConstraint(
                condition=(
                    Q(end_at__isnull=True)
                    | (
                        (Q(start_at__isnull=True) | Q(end_at__gt=F("start_at")))
                        & (Q(run_at__isnull=True) | Q(end_at__gt=F("run_at")))
                    )
                ),
                name="job_end_after_start",
            ),
            models.CheckConstraint(
                condition=Q(run_at__isnull=True) | Q(start_at__isnull=True),
                name="job_one_off_has_no_start",
            ),
            models.UniqueConstraint(
                fields=["owner", "name"],
                condition=Q(deleted_at__isnull=True),
                name="job_unique_name_per_owner",
            ),
            # jobs/tags.py's count; each tag's form is checked where it comes in.
            models.CheckConstraint(
                condition=Q(tags__len__lte=MAX_TAGS), name="job_at_most_10_tags"
            ),
            # Credentials exactly when the job has an authentication kind.
            models.CheckConstraint(
                condition=Q(auth_kind="none", auth_encrypted="")
                | (~Q(auth_kind="none") & ~Q(auth_encrypted="")),
                name="job_credentials_with_auth_kind",
            ),
        ]
        indexes = [
            # The dispatcher's due query (dispatch/queries.py LOCK_DUE_JOBS):
            # active jobs ordered by next_fire_at. Paused and deleted jobs are
            # outside the index, so its size tracks the live fleet only.
            models.Index(fields=["next_fire_at"], condition=Q(state="active"), name="job_due_idx"),
            # The lists' ?tag= filter (JobQuerySet.tagged): tags @> ARRAY[...].
            # Tagged jobs only: every fire updates its job's row (next_fire_at)
            # and a GIN index takes an entry for an untagged row too, so an
            # index of every job added an index write to every fire of an
            # untagged job (jobs/migrations/0018).
            GinIndex(fields=["tags"], name="job_tags_idx", condition=~Q(tags=[])),
        ]

    def __str__(self) -> str:
        return self.name

    # -- persistence ----------------------------------------------------------

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            # The row and its first span, as create_jobs makes them, but with
            # no "created" event and no limit: for the demo's job (made by
            # the system) and for tests' fixtures. Owners' jobs are made by
            # create_jobs (jobs/creation.py).
            now = db_now()  # one read of the database clock for all of it
            self._prepare_insert(now)
            with transaction.atomic():
                super().save(*args, **kwargs)
                history.open_spans([self.pk], now)
            return
        # An existing row is written field by field: a full-row save of a copy
        # read earlier writes back every column it holds, and that is how a
        # job the owner deleted (or the system paused) meanwhile came back
        # active. The version goes up in SQL, so two writers that started from
        # the same copy still end with two different versions (ETags).
        update_fields = kwargs.pop("update_fields", None)
        if update_fields is None:
            raise ValueError("Job.save() of an existing job must name its update_fields.")
        old_version = self.version
        self.version = F("version") + 1
        try:
            super().save(*args, update_fields={*update_fields, "version", "updated_at"}, **kwargs)
        except Exception:
            self.version = old_version
            raise
        self.refresh_from_db(fields=["version"])

    def _prepare_insert(self, now: dt.datetime) -> None:
        """What a new row takes from the database clock ``now``, and a secret
        if it was given none."""
        if not self.secret_encrypted:
            self.set_secret(crypto.generate_secret())
        if self.created_at is None:
            # An interval counts from the creation time (Schedule.for_job):
            # take it from the database clock so next_fire_at can be
            # computed before insert.
            self.created_at = now
        if self.state == JobState.ACTIVE and self.next_fire_at is None:
            self.next_fire_at = self.compute_next_fire(now)

    @classmethod
    def create_many(
        cls,
        jobs: list[Job],
        *,
        now: dt.datetime,
        actor=None,
        channel: str = Channel.SYSTEM,
        changes: list[dict],
        allowed: int | None = None,
    ) -> int | None:
        """The statement behind ``create_jobs`` (jobs/creation.py), which the
        API and the admin call: it adds the secrets and raises the limit's
        refusal.

        Insert new jobs with their first schedule span and their "created"
        event (``changes[i]`` for ``jobs[i]``): one statement, however many
        jobs (``rows_insert``: the jobs and the events each one JSON
        parameter, far cheaper to send than ``bulk_create``'s arrays; a single
        create's three statements were three round trips). ``now`` is the
        database time of the creation (the interval anchor, and where the
        schedule history starts).

        With ``allowed`` (the owner's live jobs limit; every job of one
        owner), the same statement takes the owner's lock, reads their live
        jobs under it (``LIVE_JOBS_LOCKED``) and inserts only if all of
        ``jobs`` fit: the limit's check and the insert are one statement,
        atomic without a transaction around it. Returns the owner's live jobs
        before the insert (with ``allowed``; None without): the jobs were
        inserted if that plus ``len(jobs)`` is at most ``allowed``."""
        for job in jobs:
            job._prepare_insert(now)
        actor = actor if getattr(actor, "is_authenticated", False) else None
        events = [
            JobEvent(
                job=job,
                owner_id=job.owner_id,
                actor=actor,
                channel=channel,
                action="created",
                changes=change,
            )
            for job, change in zip(jobs, changes, strict=True)
        ]
        insert_jobs, job_rows = rows_insert(jobs, "%(jobs)s")
        insert_events, event_rows = rows_insert(events, "%(events)s")
        params: dict[str, Any] = {"jobs": job_rows, "events": event_rows, "at": now}
        room, fits, answer = "", "", "NULL"
        if allowed is not None:
            [owner_id] = {job.owner_id for job in jobs}
            params.update(owner=owner_id, count=len(jobs), allowed=allowed)
            room = f"live AS ({LIVE_JOBS_LOCKED}),"
            fits = " WHERE (SELECT live FROM live) + %(count)s <= %(allowed)s"
            answer = "(SELECT live FROM live)"
        # The span and the event name their job: their foreign keys are
        # checked as the statement ends, when its jobs are there.
        statement = (
            f"WITH {room}"
            f" new_jobs AS ({insert_jobs}{fits} RETURNING {history.NEW_JOBS_RETURN}),"
            f" spans AS ({history.OPEN_FOR_NEW_JOBS}),"
            f" events AS ({insert_events}{fits})"
            f" SELECT {answer}"
        )
        with bound_cursor(prepare=True) as cur:
            cur.execute(statement, params)
            [live] = cur.fetchone()
        if allowed is None or live + len(jobs) <= allowed:
            rows_inserted(jobs)
            rows_inserted(events)
        return live

    @classmethod
    def name_taken(cls, owner_id: int, name: str, *, other_than: uuid.UUID | None = None) -> bool:
        """Whether ``owner_id`` has a live job called ``name`` (other than the
        job ``other_than``). One raw statement on the unique name index: it
        runs on every create, and the ORM took longer to build it than to run it."""
        with connection.cursor() as cur:
            cur.execute(NAME_TAKEN, [owner_id, name, other_than])
            return cur.fetchone() is not None

    def locked(self) -> Job | None:
        """This job's row as it is now, locked until the transaction ends, or
        None once it is deleted. A verb decides on this copy, never on the
        caller's, which may have been read before another writer committed."""
        return Job.objects.select_for_update().filter(pk=self.pk, deleted_at__isnull=True).first()

    def pause_notes(self) -> list[str]:
        """Why the job is paused, in words: the system's reason first, when
        the system paused it, then the owner's note if it is another (an
        owner's pause over the system's adds it); none while active."""
        if self.state != JobState.PAUSED:
            return []
        notes = [self.system_pause_note, self.pause_note]
        return [note for i, note in enumerate(notes) if note and note not in notes[:i]]

    # -- schedule -----------------------------------------------------------

    @property
    def schedule(self) -> Schedule:
        """The job's schedule, by ``Schedule.for_job``'s anchor rule (a job
        not saved yet has no ``created_at``: the rule says what then)."""
        return Schedule.for_job(
            cron=self.cron,
            interval_seconds=self.interval_seconds,
            timezone=self.timezone,
            start_at=self.start_at,
            created_at=self.created_at,
            run_at=self.run_at,
            end_at=self.end_at,
        )

    def compute_next_fire(self, after: dt.datetime) -> dt.datetime | None:
        return self.schedule.next_fire(after)

    @property
    def status(self) -> str:
        """What the job shows as (JobStatus): finished once no fire is left."""
        if self.state == JobState.ACTIVE and self.next_fire_at is None and not self.parked_since:
            return JobStatus.FINISHED
        return self.state

    # -- secrets ------------------------------------------------------------

    def set_secret(self, secret: str) -> None:
        self.secret_encrypted = crypto.encrypt(secret)

    def signing_secrets(self, now: dt.datetime) -> list[str]:
        """Current secret first; the previous one too while a rotation overlaps."""
        secrets = [crypto.decrypt(self.secret_encrypted)]
        if (
            self.previous_secret_encrypted
            and self.previous_secret_until
            and self.previous_secret_until > now
        ):
            secrets.append(crypto.decrypt(self.previous_secret_encrypted))
        return secrets

    def record_event(
        self,
        action: str,
        *,
        actor=None,
        channel: str = Channel.SYSTEM,
        changes: dict | None = None,
    ) -> JobEvent:
        """Append to the audit log. ``changes`` is built with jobs/changes.py:
        only what changed, the payload as a digest, never a secret."""
        return JobEvent.objects.create(
            job=self,
            owner_id=self.owner_id,
            actor=actor if getattr(actor, "is_authenticated", False) else None,
            channel=channel,
            action=action,
            changes=changes or {},
        )

    # -- domain verbs ---------------------------------------------------------

    @transaction.atomic
    def reschedule(self, *, actor=None, channel: str = Channel.API) -> None:
        """Recompute next_fire_at from now after the schedule was edited."""
        if self.state == JobState.ACTIVE and self.deleted_at is None:
            self.next_fire_at = self.compute_next_fire(db_now())

    def fires_missed_while_paused(self, now: dt.datetime) -> list[dt.datetime]:
        """The newest ``max_catchup`` fires f inside the pause, paused_at <= f < now.

        Searched back from now, so a pause of years costs what a pause of an
        hour does, and the fires are always the newest ones (a fire at now
        itself is not caught up: resume schedules from after now, as before).
        """
        if self.paused_at is None or now <= self.paused_at:
            return []
        return self.schedule.latest_fires(
            self.paused_at, now - dt.timedelta(microseconds=1), self.max_catchup
        )

    @transaction.atomic
    def rotate_secret(self, *, actor=None, channel: str = Channel.API) -> str:
        """New secret; for 24 hours deliveries are signed with old and new."""
        now = db_now()
        current = self.locked()
        if current is None:
            # Deleted meanwhile: a secret that is never stored must not be shown.
            raise Job.DoesNotExist("The job was deleted.")
        new_secret = crypto.generate_secret()
        before = changes.snapshot(current, ["previous_secret_until"])
        # The secret being replaced is the row's, not this copy's: a rotation
        # that committed meanwhile keeps signing through the overlap.
        current.previous_secret_encrypted = current.secret_encrypted
        current.previous_secret_until = now + ROTATION_OVERLAP
        current.set_secret(new_secret)
        current.save(
            update_fields=["secret_encrypted", "previous_secret_encrypted", "previous_secret_until"]
        )
        self.refresh_from_db()
        # When the old secret stops signing; no secret is ever in an event.
        self.record_event(
            "secret_rotated", actor=actor, channel=channel, changes=changes.since(before, current)
        )
        return new_secret


class SpanState(models.TextChoices):
    ACTIVE = "active", "Active"
    PAUSED = "paused", "Paused"
    DELETED = "deleted", "Deleted"


class ScheduleSpan(models.Model):
    """Schedule history: one row per stretch of time in which a job's state
    and schedule stayed the same (jobs/history.py writes them).

    A span covers the fires ``started_at < scheduled_at <= ended_at`` (the
    open span has no ``ended_at``). Every time is the database's. The auditor
    (ops/audit.py) reads this table, not the job row: it holds every schedule
    the job ever had, and when each was in force.
    """

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="spans")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=SpanState.choices)
    cron = models.CharField(max_length=MAX_LENGTHS["cron"], null=True, blank=True)
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)
    timezone = models.CharField(max_length=MAX_LENGTHS["timezone"])
    start_at = models.DateTimeField(null=True, blank=True)
    run_at = models.DateTimeField(null=True, blank=True)
    # No fire after it: the span expects none past end_at.
    end_at = models.DateTimeField(null=True, blank=True)
    # The job's created_at: what its interval counts from when start_at is
    # unset (jobs/schedules.py Schedule.for_job).
    anchor = models.DateTimeField()
    # Fires of this span past a recovery's recorded cap: counted, not listed.
    missed_count = models.PositiveBigIntegerField(default=0, db_default=0)

    class Meta:
        ordering = ["job", "started_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job"], condition=Q(ended_at__isnull=True), name="span_one_open_per_job"
            ),
        ]
        indexes = [models.Index(fields=["job", "started_at"], name="span_job_started_idx")]

    def __str__(self) -> str:
        return f"{self.state} from {self.started_at:%Y-%m-%d %H:%M:%S}"

    @property
    def schedule(self) -> Schedule:
        """The schedule in force during this span: the job's, as its row held
        it then (``anchor`` is the job's creation time)."""
        return Schedule.for_job(
            cron=self.cron,
            interval_seconds=self.interval_seconds,
            timezone=self.timezone,
            start_at=self.start_at,
            created_at=self.anchor,
            run_at=self.run_at,
            end_at=self.end_at,
        )


class JobEvent(models.Model):
    """The audit log: who changed a job, when, through which channel, and what
    (``changes``: jobs/changes.py). Events older than
    ``PUNCTUAL_EVENT_RETENTION_DAYS`` are deleted (runs/retention.py), oldest
    first, through the index on ``created_at``."""

    job = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL, related_name="events")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    channel = models.CharField(max_length=10, choices=Channel.choices)
    action = models.CharField(max_length=40)
    changes = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} via {self.channel} at {self.created_at:%Y-%m-%d %H:%M:%S}"


class IdempotencyKey(models.Model):
    """The stored answer to a POST sent with an ``Idempotency-Key`` header.

    A repeat of the same request with the same key, within 24 hours, gets this
    answer again instead of a second job or run (jobs/idempotency.py). The
    unique (owner, key) constraint, not a check-then-insert, decides which of
    two concurrent requests does the work.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # sha256 of method, path and body: the same key on a different request is
    # the client's bug, answered 422 rather than replayed.
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    # Fernet (jobs/crypto.py): the answer holds the job's payload. Never a
    # secret: a create answer is stored without it (jobs/idempotency.py).
    response_encrypted = models.TextField()
    # {job id: SHA-256 of the job's encrypted secret} for each job a create
    # made: a replay shows the secret only while it is still this one.
    secret_digests = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="idempotency_key_once_per_owner"),
        ]
        indexes = [
            # Expiry sweeps: keys older than 24 hours.
            models.Index(fields=["created_at"], name="idempotency_key_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.status_code})"


def _override(name: str, label: str, help_text: str) -> models.PositiveIntegerField:
    """An OwnerLimits field: empty means the setting's default."""
    setting, bounds = OWNER_LIMITS[name]
    return models.PositiveIntegerField(
        label,
        null=True,
        blank=True,
        validators=bounds.validators(),
        help_text=f"{help_text} Empty: the default, {setting}.",
    )


class OwnerLimits(models.Model):
    """One owner's own limits, where they differ from the defaults
    (docs/guides/owners.md "Owner limits"). Only superusers see or change these
    rows (console/owner_limits_admin.py); jobs/quotas.py reads them."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="owner_limits",
    )
    jobs_per_owner = _override(
        "jobs_per_owner", "live jobs", "The most jobs this owner may have (paused ones count)."
    )
    min_interval_seconds = _override(
        "min_interval_seconds",
        "minimum interval (seconds)",
        "The shortest interval_seconds of this owner's jobs (1 to 60).",
    )
    backfill_runs_per_hour = _override(
        "backfill_runs_per_hour",
        "backfill runs per hour",
        "Runs this owner's backfills may create in any hour.",
    )
    triggers_per_minute = _override(
        "triggers_per_minute",
        "triggers per minute",
        "Manual runs, test deliveries and retries of runs of each of this owner's jobs in any"
        " minute.",
    )
    note = models.CharField(
        max_length=500, blank=True, default="", help_text="Why this owner has these limits."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "owner limits"
        verbose_name_plural = "owner limits"

    def __str__(self) -> str:
        return f"limits of {self.owner}"


class BackfillUse(models.Model):
    """The runs one backfill created, for the owner's hourly backfill limit
    (jobs/quotas.py). Runs cannot say when they were made cheaply (the runs
    table is partitioned by the fire's time, and a backfill's fires are in
    the past), so each backfill writes a row here, and the next backfill of
    the same owner deletes the rows older than the hour."""

    id = models.BigAutoField(primary_key=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    # The database's time of the backfill.
    used_at = models.DateTimeField()
    runs = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["owner", "used_at"], name="backfilluse_owner_used_idx")]

    def __str__(self) -> str:
        return f"{self.runs} backfill runs at {self.used_at:%Y-%m-%d %H:%M:%S}"


class RetryUse(models.Model):
    """An operator's retry of one of a job's runs, for the job's triggers per
    minute (jobs/quotas.py), which retries share with manual runs and test
    deliveries. A manual run is scheduled at its trigger's time, so the runs
    themselves say when it was made; a retry makes no run (it puts an old
    one back to pending), so each retry writes a row here, and the job's
    next retry deletes its rows older than the minute."""

    id = models.BigAutoField(primary_key=True)
    # No constraint in the database: the bench removes its jobs with plain
    # SQL (ops/bench/), and a use left behind by a job gone that way is
    # never read again.
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    # The database's time of the retry.
    used_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["job", "used_at"], name="retryuse_job_used_idx")]

    def __str__(self) -> str:
        return f"a retry at {self.used_at:%Y-%m-%d %H:%M:%S}"
