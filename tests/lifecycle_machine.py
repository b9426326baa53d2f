"""A seeded, stateful walk through job lifecycles on the real database, for
tests/integration/test_lifecycle_stateful.py.

A *sequence* is a list of abstract steps generated from a seed alone: owner
actions (create, edit, pause, resume, trigger, test delivery, backfill,
delete; edits of the schedule, its start and end, and one-off times) through the
verbs the API and admin call (runs/job_verbs.py), dispatcher work (tick,
auto-resume, fail_exhausted) and worker work (claim, heartbeat, complete,
release, crash) through runs/leases.py and runs/outcomes.py, and jumps of the
database clock (the test-only ``punctual.clock_offset``, core/db.py). A step
names its job, worker or lease by a number that is resolved modulo what exists
when it runs, so any sub-list of a sequence is itself a valid sequence: that
is what lets a failure be shrunk to a few steps and replayed with
``PUNCTUAL_STATEFUL_SEED`` (and ``PUNCTUAL_STATEFUL_KEEP``).

After every step the invariants are checked (``Machine.check``): the fire
auditor, no attempt of a paused or deleted job but a manual run or test
delivery made during the pause, the overlap rule of the policy now in force,
and versions (ETags). Every sequence runs inside one
savepoint that is rolled back, so sequences do not see each other's rows.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import F

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from jobs.models import Channel, Job, JobState
from ops.audit import Rule, audit
from runs import job_verbs, leases, outcomes
from runs.after_attempt import after_attempt
from runs.models import Run
from runs.retry import Outcome
from tests.factories import make_job

CRONS = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "* * * * *", "15,45 * * * *", "0 */2 * * *"]
INTERVALS = [30, 60, 300, 900, 3600]
TIMEZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
START_OFFSETS = [None, -3600, 600, 7200]  # start_at relative to now, in seconds
# end_at and a one-off's run_at, relative to now, in seconds: an end that
# comes within the sequence's clock jumps, one far off, none, one just past.
END_OFFSETS = [None, 120, 900, 4 * 3600, -60]
RUN_OFFSETS = [45, 600, 3 * 3600]
OVERLAPS = ["skip", "queue", "allow"]
MISFIRES = ["skip", "catch_up"]
TARGETS = ["webhook", "pull"]
# The overlap policy twice: its switches are where two runs can meet.
EDIT_FIELDS = [
    "cron",
    "interval",
    "timezone",
    "start_at",
    "target_kind",
    "overlap",
    "overlap",
    "misfire",
    "end_at",
    "run_at",
]
WORKERS = 3
# PUNCTUAL_STATEFUL_AUDIT=0 leaves the auditor out, to see what the other
# invariants find behind its failures (a diagnosis aid, never the default).
AUDIT = os.environ.get("PUNCTUAL_STATEFUL_AUDIT", "1") != "0"

# Owner-visible job columns that only a versioned write may change. The
# counters the hot paths maintain in SQL without a new version (next_fire_at,
# consecutive_failures, missed_count, missed_since, updated_at) are not part
# of what an ETag names.
VERSIONED = (
    "name",
    "cron",
    "interval_seconds",
    "timezone",
    "start_at",
    "target_kind",
    "url",
    "misfire_policy",
    "max_catchup",
    "misfire_grace_seconds",
    "overlap_policy",
    "max_attempts",
    "pause_after_failures",
    "state",
    "pause_note",
    "paused_at",
    "resume_at",
    "deleted_at",
    "secret_encrypted",
)


def audit_problems(job_ids: list, since: dt.datetime) -> list:
    """The fire auditor's violations for ``job_ids`` since ``since``, up to the
    database's now. The one place this test calls the auditor: when its
    interface changes, only this line does. The machine's dispatcher and
    workers are steps, not processes: nothing beats a fleet row, so the
    rules about a dead fleet would only ever say that."""
    dead_fleet = (Rule.NO_DISPATCHER, Rule.NO_WORKER)
    return [v for v in audit(since, job_ids=job_ids).violations if v.rule not in dead_fleet]


# -- steps ------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    action: str
    args: tuple = ()

    def __str__(self) -> str:
        return f"{self.action}({', '.join(map(str, self.args))})"


def _job_spec(rng: random.Random) -> tuple:
    schedule = (
        ("cron", rng.choice(CRONS)) if rng.random() < 0.4 else ("interval", rng.choice(INTERVALS))
    )
    return (
        *schedule,
        rng.choice(TIMEZONES),
        rng.choice(OVERLAPS),
        rng.choice(MISFIRES),
        rng.choice(TARGETS) if rng.random() < 0.3 else "webhook",
        rng.randint(1, 3),  # max_attempts
        rng.choice([None, None, 2]),  # pause_after_failures
    )


def _advance(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.45:
        return rng.randint(1, 60)
    if r < 0.8:
        return rng.randint(60, 900)
    return rng.randint(3600, 6 * 3600)


def generate(seed: int) -> list[Step]:
    """The sequence of ``seed``: 2 job creations, then 15 to 18 steps (a third
    job may be created among them)."""
    rng = random.Random(seed)
    steps = [Step("create", _job_spec(rng)) for _ in range(2)]
    weights = {
        "advance": 14,
        "tick": 14,
        "claim": 12,
        "complete": 12,
        "heartbeat": 4,
        "crash": 3,
        "release": 1,
        "auto_resume": 3,
        "fail_exhausted": 3,
        "pause": 5,
        "resume": 5,
        "trigger": 4,
        "test": 3,
        "backfill": 2,
        "edit": 10,
        "delete": 1,
        "create": 2,
    }
    actions, w = zip(*weights.items(), strict=True)
    for _ in range(rng.randint(15, 18)):
        action = rng.choices(actions, w)[0]
        job = rng.randrange(3)
        worker = rng.randrange(WORKERS)
        if action == "advance":
            args: tuple = (_advance(rng),)
        elif action == "claim":
            target = rng.choice(TARGETS)
            args = (worker, target, rng.randint(1, 3), rng.choice([30, 60, 300]))
        elif action == "complete":
            outcome = rng.choices(["success", "retry", "gone", "permanent"], [5, 4, 1, 1])[0]
            args = (worker, rng.randrange(4), outcome)
        elif action in ("heartbeat", "crash", "release"):
            args = (worker,)
        elif action == "pause":
            args = (job, rng.choice([None, None, 30, 600, 3600]))
        elif action == "resume":
            args = (job, rng.random() < 0.4)
        elif action in ("trigger", "test", "delete"):
            args = (job,)
        elif action == "backfill":
            args = (job, rng.choice([600, 3600, 4 * 3600]), rng.choice([300, 1800, 3600]))
        elif action == "edit":
            name = rng.choice(EDIT_FIELDS)
            args = (job, name, rng.randrange(12))
        elif action == "create":
            args = _job_spec(rng)
        else:
            args = ()
        steps.append(Step(action, args))
    return steps


# -- the machine --------------------------------------------------------------


@dataclass
class Failure:
    seed: int
    step: int  # index into the steps run, -1 for the final drain
    kind: str  # the failure class
    message: str
    steps: list[Step]
    keep: list[int] | None = None  # indices of the generated steps that were run

    def render(self) -> str:
        where = "the final drain" if self.step < 0 else f"step {self.step}"
        lines = [f"seed {self.seed}: {self.kind} after {where}: {self.message}"]
        lines += [f"  {k:>2} {s}" for k, s in enumerate(self.steps)]
        env = f"PUNCTUAL_STATEFUL_SEED={self.seed}"
        if self.keep is not None:
            env += f" PUNCTUAL_STATEFUL_KEEP={','.join(map(str, self.keep))}"
        lines.append(f"  reproduce: {env} pytest tests/integration/test_lifecycle_stateful.py")
        return "\n".join(lines)


class Violation(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Held:
    run_id: uuid.UUID
    job_id: uuid.UUID
    attempt: int
    started_at: dt.datetime | None
    max_attempts: int
    backoff: int


@dataclass
class Worker:
    name: str
    held: list[Held] = field(default_factory=list)


@dataclass
class Stop:
    """A stretch in which the job was paused or deleted: no attempt of a run
    that existed then may start in ``[start, end)``."""

    start: dt.datetime
    end: dt.datetime | None
    step: int  # the step after which it was seen


@dataclass
class JobModel:
    job: Job
    stops: list[Stop] = field(default_factory=list)
    policy: str = ""
    exclusive_since: dt.datetime | None = None  # None: exclusive from its creation
    queue_since_step: int = -1
    versions: dict[int, tuple] = field(default_factory=dict)
    last_version: int = 0


class Machine:
    def __init__(self, seed: int, owner, steps: list[Step]) -> None:
        self.seed = seed
        self.owner = owner
        self.steps = steps
        self.rng = random.Random(seed ^ 0x5EED)
        self.offset = 0
        self.jobs: list[JobModel] = []
        self.workers = [Worker(f"w{k}.0") for k in range(WORKERS)]
        self.incarnations = [0] * WORKERS
        self.first_seen: dict[uuid.UUID, int] = {}
        self.dispatcher = Dispatcher(name=f"stateful-{seed}")
        self.since = db_now() - dt.timedelta(seconds=1)
        self.step_start = self.since
        self.audited_writes: tuple = ()

    # -- running ------------------------------------------------------------

    def run(self) -> Failure | None:
        """Run every step and check after each; then drain and check once more."""
        for k, step in enumerate(self.steps):
            self.step_start = db_now()
            try:
                getattr(self, f"do_{step.action}")(*step.args)
                # The schedule-history guard is a deferred trigger, checked
                # at commit; the test never commits, so ask for it now.
                with connection.cursor() as cur:
                    cur.execute("SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED")
            except Exception as exc:
                # The sequence's savepoint is rolled back by the caller.
                return self._failure(k, f"exception:{type(exc).__name__}", _short(exc))
            try:
                self.check(k)
            except Violation as v:
                return self._failure(k, v.kind, str(v))
        try:
            self.drain()
            self.check(len(self.steps), final=True)
        except Violation as v:
            return self._failure(-1, v.kind, str(v))
        except Exception as exc:
            return self._failure(-1, f"exception:{type(exc).__name__}", _short(exc))
        return None

    def _failure(self, k: int, kind: str, message: str) -> Failure:
        return Failure(self.seed, k, kind, message, self.steps)

    def drain(self) -> None:
        """The fleet comes back: past every lease and deadline, the
        dispatcher and a healthy worker of each target finish everything, so
        no run may be left stuck."""
        self.step_start = db_now()
        self.do_advance(900)
        self.do_tick()
        self.do_fail_exhausted()
        for target in TARGETS:
            # Until nothing is left to claim: a run held back by the overlap
            # rule starts once the one ahead of it completed.
            for _ in range(20):
                claimed = self._claim("drain", target, 1000, 300)
                if not claimed:
                    break
                outcomes.complete("drain", [self._result(h, "success") for h in claimed])
        self._check_hand_made_runs_ran()

    def _check_hand_made_runs_ran(self) -> None:
        """After the drain, no manual run or test delivery made during its
        job's pause is still waiting while the job stays paused: the claims
        took them without a resume."""
        left = Run.objects.filter(
            job_id__in=[m.job.pk for m in self.jobs],
            job__state=JobState.PAUSED,
            job__deleted_at__isnull=True,
            kind__in=("manual", "test"),
            state__in=("pending", "retrying"),
            scheduled_at__gte=F("job__paused_at"),
        ).values_list("id", "kind", "state")
        if left:
            raise Violation(
                "pause:hand-made-run-left-waiting",
                f"{len(left)} manual or test runs of paused jobs never started: {list(left)[:3]}",
            )

    # -- the clock ------------------------------------------------------------

    def do_advance(self, seconds: int) -> None:
        self.offset += seconds
        with connection.cursor() as cur:
            cur.execute(
                "SELECT set_config('punctual.clock_offset', %s, true)", [f"{self.offset} seconds"]
            )

    # -- the owner ------------------------------------------------------------

    def _job(self, k: int) -> JobModel | None:
        live = [m for m in self.jobs if m.job.deleted_at is None]
        if not live:
            return None
        m = live[k % len(live)]
        m.job.refresh_from_db()
        return m

    def do_create(
        self, kind, schedule, tz, overlap, misfire, target, attempts, pause_after
    ) -> None:
        fields: dict[str, Any] = (
            {"cron": schedule} if kind == "cron" else {"interval_seconds": schedule}
        )
        job = make_job(
            self.owner,
            timezone=tz,
            overlap_policy=overlap,
            misfire_policy=misfire,
            target_kind=target,
            max_attempts=attempts,
            pause_after_failures=pause_after,
            retry_backoff_seconds=10,
            **fields,
        )
        self.jobs.append(JobModel(job=job, policy=overlap))

    def do_edit(self, k: int, name: str, choice: int) -> None:
        m = self._job(k)
        if m is None:
            return
        job = m.job
        values: dict[str, Any]
        if name == "cron":
            values = {"cron": CRONS[choice % len(CRONS)], "interval_seconds": None, "run_at": None}
        elif name == "interval":
            values = {
                "interval_seconds": INTERVALS[choice % len(INTERVALS)],
                "cron": None,
                "run_at": None,
            }
        elif name == "timezone":
            values = {"timezone": TIMEZONES[choice % len(TIMEZONES)]}
        elif name in ("start_at", "end_at", "run_at"):
            values = self._times(job, name, choice)
            if values is None:
                return
        elif name == "target_kind":
            values = {"target_kind": "pull" if job.target_kind == "webhook" else "webhook"}
        elif name == "overlap":
            values = {"overlap_policy": OVERLAPS[choice % len(OVERLAPS)]}
        else:
            values = {"misfire_policy": MISFIRES[choice % len(MISFIRES)]}
        # As the API's PATCH does (api/job_views.py).
        job_verbs.edit(job, values, channel=Channel.API)

    @staticmethod
    def _times(job, name: str, choice: int) -> dict[str, Any] | None:
        """A new start, end or one-off time, relative to now, as the API
        would take it (the end after the start and the one fire; a one-off
        without a start), or None where the API would refuse every one."""
        now = db_now()
        if name == "run_at":
            run_at = now + dt.timedelta(seconds=RUN_OFFSETS[choice % len(RUN_OFFSETS)])
            values: dict[str, Any] = {
                "run_at": run_at,
                "cron": None,
                "interval_seconds": None,
                "start_at": None,
            }
            if job.end_at is not None and job.end_at <= run_at:
                values["end_at"] = None
            return values
        offsets = START_OFFSETS if name == "start_at" else END_OFFSETS
        offset = offsets[choice % len(offsets)]
        when = None if offset is None else now + dt.timedelta(seconds=offset)
        if name == "start_at":
            if job.run_at is not None and when is not None:
                return None
            ends_first = when is not None and job.end_at is not None and job.end_at <= when
            return {"start_at": when, **({"end_at": None} if ends_first else {})}
        first = job.start_at or job.run_at
        if when is not None and first is not None and when <= first:
            return None
        return {"end_at": when}

    def do_pause(self, k: int, resume_in: int | None) -> None:
        m = self._job(k)
        if m is not None:
            resume_at = None if resume_in is None else db_now() + dt.timedelta(seconds=resume_in)
            job_verbs.pause(m.job, note="stateful", resume_at=resume_at)

    def do_resume(self, k: int, catch_up: bool) -> None:
        m = self._job(k)
        if m is not None:
            job_verbs.resume(m.job, catch_up=catch_up)

    def do_trigger(self, k: int) -> None:
        m = self._job(k)
        if m is not None:
            job_verbs.trigger(m.job)

    def do_test(self, k: int) -> None:
        m = self._job(k)
        if m is not None:
            job_verbs.send_test_delivery(m.job)

    def do_backfill(self, k: int, back: int, span: int) -> None:
        m = self._job(k)
        if m is None:
            return
        start = db_now() - dt.timedelta(seconds=back)
        end = start + dt.timedelta(seconds=span)
        # The API refuses a window of more than MAX_BACKFILL fires.
        if m.job.schedule.count_fires_between(start, end, cap=job_verbs.MAX_BACKFILL + 1) <= (
            job_verbs.MAX_BACKFILL
        ):
            job_verbs.backfill(m.job, start, end)

    def do_delete(self, k: int) -> None:
        m = self._job(k)
        if m is not None:
            job_verbs.soft_delete(m.job)
            m.job.refresh_from_db()

    # -- the dispatcher -------------------------------------------------------

    def do_tick(self) -> None:
        while self.dispatcher.tick().jobs >= self.dispatcher.batch_size:
            pass

    def do_auto_resume(self) -> None:
        self.dispatcher._auto_resume()

    def do_fail_exhausted(self) -> None:
        # The dispatcher's housekeeping, as Dispatcher._reap_and_prune runs it.
        outcomes.fail_exhausted()
        outcomes.cancel_stopped()

    # -- workers --------------------------------------------------------------

    def _claim(self, name: str, target: str, limit: int, lease: int) -> list[Held]:
        scope = {"job_owner_id": self.owner.pk} if target == "pull" else {}
        claimed = leases.claim(name, limit=limit, lease_seconds=lease, target_kind=target, **scope)
        return [
            Held(
                c.run_id,
                c.job_id,
                c.attempt,
                c.attempt_started_at,
                c.max_attempts,
                c.retry_backoff_seconds,
            )
            for c in claimed
        ]

    def do_claim(self, w: int, target: str, limit: int, lease: int) -> None:
        worker = self.workers[w]
        worker.held += self._claim(worker.name, target, limit, lease)

    def do_heartbeat(self, w: int) -> None:
        worker = self.workers[w]
        kept = leases.heartbeat(worker.name, [(h.run_id, h.attempt) for h in worker.held])
        worker.held = [h for h in worker.held if h.run_id in kept]

    def _result(self, h: Held, outcome: str) -> outcomes.Result:
        status = {"success": 200, "retry": 500, "gone": 410, "permanent": 400}[outcome]
        kind = {"success": Outcome.SUCCESS, "retry": Outcome.RETRYABLE}.get(
            outcome, Outcome.PERMANENT
        )
        decision = after_attempt(
            kind,
            attempt=h.attempt,
            max_attempts=h.max_attempts,
            backoff_seconds=h.backoff,
            now=db_now(),
            rng=self.rng,
            status_code=status,
            gone=outcome == "gone",
        )
        return outcomes.Result(
            run_id=h.run_id,
            job_id=h.job_id,
            attempt=h.attempt,
            status_code=status,
            started_at=h.started_at,
            duration_ms=5,
            state=decision.state,
            retry_in=decision.retry_in,
            reason=decision.reason,
            attempt_outcome=decision.attempt_outcome,
            pause_note=decision.pause_note,
        )

    def do_complete(self, w: int, index: int, outcome: str) -> None:
        worker = self.workers[w]
        if not worker.held:
            return
        h = worker.held.pop(index % len(worker.held))
        outcomes.complete(worker.name, [self._result(h, outcome)])

    def do_release(self, w: int) -> None:
        worker = self.workers[w]
        leases.release(worker.name, [(h.run_id, h.attempt) for h in worker.held])
        worker.held = []

    def do_crash(self, w: int) -> None:
        """The worker dies: it never heartbeats or completes again, and its
        leases expire as the clock moves on. A new one takes its slot."""
        self.incarnations[w] += 1
        self.workers[w] = Worker(f"w{w}.{self.incarnations[w]}")

    # -- invariants -------------------------------------------------------------

    def check(self, k: int, *, final: bool = False) -> None:
        ids = [m.job.pk for m in self.jobs]
        runs = list(
            Run.objects.filter(job_id__in=ids).values_list(
                "id", "job_id", "state", "kind", "attempt", "attempt_started_at", named=True
            )
        )
        by_job: dict[uuid.UUID, list] = {pk: [] for pk in ids}
        for run in runs:
            self.first_seen.setdefault(run.id, k)
            by_job[run.job_id].append(run)
        rows = {j.pk: j for j in Job.objects.filter(pk__in=ids)}
        for m in self.jobs:
            m.job = rows[m.job.pk]
            self._observe(m, k)
            self._check_version(m)
            self._check_overlap(m, by_job[m.job.pk])
        self._check_no_attempt_while_stopped(ids, runs)
        if ids and AUDIT and self._audit_inputs_changed(final):
            problems = [
                v for v in audit_problems(ids, self.since) if final or v.rule != Rule.STUCK_RUNNING
            ]
            if problems:
                listed = "; ".join(str(v) for v in problems[:3])
                raise Violation(
                    f"audit:{problems[0].rule}", f"{len(problems)} violations: {listed}"
                )

    def _audit_inputs_changed(self, final: bool) -> bool:
        """Whether the auditor could answer differently than after the last
        step: some row was written in this transaction since then (the
        transaction's own tuple counters), or the clock jumped. A step that
        wrote nothing leaves every input of the audit as it was but the clock,
        which moved by milliseconds only, so its answer is the same: not
        asking again saves a third of the run time."""
        with connection.cursor() as cur:
            cur.execute(
                "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)"
                " FROM pg_stat_xact_user_tables"
            )
            writes = (cur.fetchone()[0], self.offset)
        changed = final or writes != self.audited_writes
        self.audited_writes = writes
        return changed

    def _observe(self, m: JobModel, k: int) -> None:
        job = m.job
        open_stop = m.stops[-1] if m.stops and m.stops[-1].end is None else None
        if job.deleted_at is not None or job.state == JobState.PAUSED:
            if open_stop is None:
                start = job.deleted_at if job.deleted_at is not None else job.paused_at
                m.stops.append(Stop(start or self.step_start, None, k))
        elif open_stop is not None:
            open_stop.end = self.step_start
        if job.overlap_policy != m.policy:
            if m.policy == "allow":
                m.exclusive_since = self.step_start
            if job.overlap_policy == "queue":
                m.queue_since_step = k
            m.policy = job.overlap_policy

    def _check_version(self, m: JobModel) -> None:
        job = m.job
        content = tuple(getattr(job, f) for f in VERSIONED)
        if job.version < m.last_version:
            raise Violation("version:went-back", f"job {job.pk} {m.last_version} -> {job.version}")
        seen = m.versions.setdefault(job.version, content)
        if seen != content:
            diff = [f for f, a, b in zip(VERSIONED, seen, content, strict=True) if a != b]
            raise Violation(
                "version:etag-reused",
                f"job {job.pk} version {job.version} names two contents: {diff}",
            )
        m.last_version = job.version

    def _check_overlap(self, m: JobModel, runs: list) -> None:
        """At most one run running under skip or queue, at most one scheduled
        run waiting under queue, for the policy now in force. What an
        ``allow`` job already had running (or a queue job waiting) when it
        switched is left to finish; anything started (or planned) after the
        switch counts."""
        job = m.job
        if job.overlap_policy == "allow":
            return
        running = [r for r in runs if r.state == "running"]
        if len(running) > 1:
            since = m.exclusive_since
            late = [r for r in running if since is None or r.attempt_started_at >= since]
            if late:
                raise Violation(
                    "overlap:two-running",
                    f"job {job.pk} ({job.overlap_policy}) has {len(running)} runs running,"
                    f" {len(late)} of them started under this policy",
                )
        if job.overlap_policy == "queue":
            waiting = [
                r for r in runs if r.state in ("pending", "retrying") and r.kind == "scheduled"
            ]
            late = [r for r in waiting if self.first_seen.get(r.id, 0) > m.queue_since_step]
            if len(waiting) > 1 and late:
                raise Violation(
                    "overlap:queue-two-waiting",
                    f"job {job.pk} (queue) has {len(waiting)} scheduled runs waiting",
                )

    def _check_no_attempt_while_stopped(self, ids: list, runs: list) -> None:
        """No attempt (recorded, or running now) started while its job was
        paused or deleted, but one of a manual run or a test delivery made
        during the pause, before any delete (docs/design/guarantees.md "A
        pause stops the schedule, not what you ask for now")."""
        with connection.cursor() as cur:
            cur.execute(
                """
                SELECT r.job_id, r.id, r.kind, a.number, a.started_at
                FROM runs_attempt AS a JOIN runs_run AS r ON r.id = a.run_id
                WHERE r.job_id = ANY(%(ids)s::uuid[]) AND a.started_at IS NOT NULL
                """,
                {"ids": [str(i) for i in ids]},
            )
            starts = cur.fetchall()
        starts += [
            (r.job_id, r.id, r.kind, r.attempt, r.attempt_started_at)
            for r in runs
            if r.state == "running"
        ]
        jobs = {m.job.pk: m for m in self.jobs}
        for job_id, run_id, kind, number, started in starts:
            deleted = jobs[job_id].job.deleted_at
            for stop in jobs[job_id].stops:
                if not (stop.start <= started and (stop.end is None or started < stop.end)):
                    continue
                # A manual run or test delivery the owner made while the job
                # was paused is their explicit "run it now", not a fire: it
                # starts at once. A backfill waits for the resume, and
                # nothing starts once the job is deleted.
                if (
                    kind in ("manual", "test")
                    and self.first_seen.get(run_id, 0) > stop.step
                    and (deleted is None or started < deleted)
                ):
                    continue
                raise Violation(
                    "pause:attempt-while-stopped",
                    f"job {job_id}: run {run_id} ({kind}) attempt {number} started at"
                    f" {started.isoformat()}, inside a pause/delete from {stop.start.isoformat()}",
                )


def _short(exc: Exception) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{text} (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno})"


# -- one sequence, and shrinking --------------------------------------------------


def run_steps(seed: int, owner, steps: list[Step]) -> Failure | None:
    """Run ``steps`` in a savepoint that is rolled back afterwards."""
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT set_config('punctual.clock_offset', '', true)")
        try:
            return Machine(seed, owner, steps).run()
        finally:
            transaction.set_rollback(True)


def run_seed(seed: int, owner, keep: list[int] | None = None) -> Failure | None:
    steps = generate(seed)
    if keep is not None:
        steps = [steps[k] for k in keep]
    failure = run_steps(seed, owner, steps)
    if failure is not None:
        failure.keep = keep
    return failure


def shrink(seed: int, owner, failure: Failure, budget: int = 150) -> Failure:
    """A short sub-list of the seed's steps that still fails with the same
    failure class: drop chunks of steps, halving the chunk size down to
    single steps (a simple delta debugging)."""
    keep = failure.keep if failure.keep is not None else list(range(len(generate(seed))))
    if failure.step >= 0:  # steps after the failing one cannot matter
        keep = keep[: failure.step + 1]
    best, tries = failure, 0
    size = max(1, len(keep) // 2)
    while tries < budget:
        removed = False
        start = 0
        while start < len(keep) and tries < budget:
            candidate = keep[:start] + keep[start + size :]
            tries += 1
            got = run_seed(seed, owner, candidate) if candidate else None
            if got is not None and got.kind == failure.kind:
                keep, best, removed = candidate, got, True
            else:
                start += size
        if size == 1 and not removed:
            break
        size = max(1, size // 2)
    best.keep = keep
    return best
