"""The dispatcher: turns due fires into runs (``dispatch``, docs/operating/processes.md).

``Dispatcher.tick()`` does one batch in one transaction:

1. Lock up to ``batch_size`` due active jobs (``FOR NO KEY UPDATE SKIP LOCKED``,
   so any number of dispatchers share the due set without a leader). The
   commonest case (an interval job with one due fire within grace, and
   nothing for the overlap rule to decide) is inserted and advanced in one
   SQL statement first; the rest take the planned path below.
2. Read how many runs each has running and waiting (overlap policy).
3. Plan each job's fires up to the database's ``now()`` (runs/planning.py:
   misfire and overlap policies, pure).
4. Insert the runs with ``ON CONFLICT DO NOTHING``, advance ``next_fire_at``
   and add the misfires counted past the recorded cap to the job's and its
   open schedule span's ``missed_count``, in one statement, then commit,
   with one NOTIFY (runs/notify.py) when the tick made runs claimable: idle
   workers wake at the commit. A jittered run is announced by the first
   tick at or after its ``available_at``.

``run_once()`` ticks until the due set is drained (beating its fleet row
between ticks when a beat is due), then does housekeeping: heartbeat,
``resume_at`` auto-resumes, failing runs whose last lease expired,
creating the coming days' run partitions, dropping the days past retention,
a small batch of retention pruning, and deleting the rate-limit counters whose
window ended. ``run_forever()`` sleeps until the
earliest next fire (capped at MAX_SLEEP) between rounds, so fires don't wait
on a fixed poll.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import heapq
import logging
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
)

from alerts import events as alert_events
from core import collector
from core.db import hot_transaction
from dispatch import fleet, queries
from jobs.schedules import jitter_offset
from runs import job_verbs, notify, partitions
from runs.planning import MISSED, PENDING, DueJob, plan_job

log = logging.getLogger("punctual.dispatch")

MAX_SLEEP = 1.0
# Fires spread over the second would otherwise wake the loop every few
# milliseconds for one job each; batching them 20 ms at a time costs at most
# 20 ms of lag and saves most of the per-tick overhead.
MIN_SLEEP = 0.02
HEARTBEAT_EVERY = 2.0
LAG_SAMPLE_EVERY = 10.0
HOUSEKEEPING_EVERY = 5.0
# Creating the coming days' partitions and dropping expired days
# (runs/partitions.py): cheap to check, but no need to every round.
PARTITIONS_EVERY = 60.0
PRUNE_BATCH = 1000
PRUNE_BUDGET = 0.5
# A round that fails for another reason than the database being away waits
# 1 s, 2 s, 4 s ... up to this, until a round succeeds again.
MAX_BACKOFF = 30.0
# At most about this many runs written per locked batch on the planned path.
# A recovery writes up to ~100 rows per job (the missed cap); without a
# budget, 1,000 such jobs are 100,000 rows under one set of row locks, and an
# owner's write to any of them (and the fast path's next tick) waits seconds.
# With it, each batch holds its locks for a fraction of a second, whatever
# the outage, and the drain takes as many batches as it needs.
ROW_BUDGET = 2000
# Jittered runs this dispatcher made that are not claimable yet, remembered so
# that a tick announces them when they become so; past this many, the farthest
# are left to the workers' safety poll.
MAX_LATER_WAKEUPS = 100_000


@dataclass
class TickResult:
    jobs: int = 0
    created: dict[str, int] = field(default_factory=dict)
    now: dt.datetime | None = None
    # The batch stopped at a limit (batch size or row budget): more may be due.
    more: bool = False

    @property
    def runs(self) -> int:
        return sum(self.created.values())

    @property
    def fires(self) -> int:
        return self.created.get(PENDING, 0)


@dataclass
class PlannedBatch:
    """The planned path's share of one tick: what plan_batch made of the
    locked due jobs, and what the insert created."""

    # Jobs planned: the rest of the locked batch, past ROW_BUDGET, stays due.
    planned: int = 0
    advances: list[queries.Advance] = field(default_factory=list)
    # (position of the job in advances, scheduled_at, kind, state, reason)
    runs: list[tuple] = field(default_factory=list)
    # (job id, problem) of each job whose schedule could not be read
    unreadable: list[tuple[uuid.UUID, str]] = field(default_factory=list)
    # Misfires past the recorded cap, counted on the jobs rather than written.
    counted: int = 0
    # The batch stopped at a limit (the lock's or the row budget): more may be due.
    more: bool = False
    # Runs inserted, by state.
    created: dict[str, int] = field(default_factory=dict)


def plan_batch(
    due: list[DueJob],
    now: dt.datetime,
    active: dict[uuid.UUID, tuple[int, int]],
    *,
    more: bool,
) -> PlannedBatch:
    """Plan each locked job's fires up to ``now`` (runs/planning.py), given
    its runs running and waiting (``active``), until the batch's rows reach
    ROW_BUDGET. ``more``: the lock already stopped at its limit."""
    batch = PlannedBatch(more=more)
    for job in due:
        if len(batch.runs) >= ROW_BUDGET:
            # The rest of the batch stays due, untouched: its locks go
            # at this commit and the next batch takes it.
            batch.more = True
            break
        batch.planned += 1
        try:
            plan = plan_job(job, now, *active.get(job.id, (0, 0)))
        except Exception as exc:
            # One bad row (a zone this host's tzdata lacks, a cron
            # that cannot be parsed) must not stop every other job:
            # it is paused after the insert, in this transaction, and the
            # rest of the batch commits.
            log.exception("schedule cannot be read", extra={"job_id": str(job.id)})
            batch.unreadable.append((job.id, str(exc) or type(exc).__name__))
            continue
        position = len(batch.advances)
        batch.advances.append(
            queries.Advance(
                id=job.id,
                next_fire_at=plan.next_fire_at,
                max_attempts=job.max_attempts,
                target_kind=job.target_kind,
                exclusive=job.overlap_policy != "allow",
                jitter=dt.timedelta(seconds=jitter_offset(job.id, job.jitter_seconds)),
                missed_counted=plan.missed_counted,
                missed_since=plan.missed_since,
                owner_id=job.owner_id,
            )
        )
        batch.runs.extend((position, r.scheduled_at, r.kind, r.state, r.reason) for r in plan.runs)
        batch.counted += plan.missed_counted
    return batch


class Dispatcher:
    def __init__(
        self,
        *,
        batch_size: int = 1000,
        shard: tuple[int, int] | None = None,
        name: str | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.shard = shard
        self.registration = fleet.Registration("dispatcher", name)
        self.stopping = threading.Event()
        self._next_beat = 0.0
        self._next_sample = 0.0
        self._next_housekeeping = 0.0
        self._next_partitions = 0.0
        # How many jobs the planned path locks per batch: batch_size, or
        # fewer while a recovery writes many rows per job (ROW_BUDGET).
        self._planned_limit = batch_size
        # When this dispatcher's jittered runs become claimable (database
        # time, a heap), and (database now, monotonic) at the last tick.
        self._later: list[dt.datetime] = []
        self._last_tick: tuple[dt.datetime, float] | None = None

    # -- one batch ------------------------------------------------------------

    def tick(self, now: dt.datetime | None = None) -> TickResult:
        """One batch of due jobs, one transaction, in the steps the module's
        docstring numbers: the fast path, then the planned batch with what
        the fast path left of ``batch_size``, then one announcement. ``now``
        is for tests only: production passes None, and the database clock
        decides."""
        started = time.monotonic()
        with hot_transaction():
            # The floor stays put until the tick commits (runs/partitions.py).
            db_time, floor = partitions.now_and_floor()
            now = now or db_time
            # No active run is scheduled past the later of the two clocks.
            ceiling = max(now, db_time) + partitions.ACTIVE_CEILING_MARGIN
            self._last_tick = (now, time.monotonic())
            fast = self._fast_path(now, floor, ceiling)
            limit = min(self.batch_size - fast.jobs, self._planned_limit)
            batch = None if fast.more else self._planned_batch(now, floor, ceiling, limit)
            if batch is None:
                self._announce(now, claimable=fast.fires)
                return fast
            self._announce(now, claimable=fast.fires + self._claimable_now(now, batch))
        self._pace(batch)
        self._log_fires_not_run(now, batch, started)
        created = batch.created
        for state, n in fast.created.items():
            created[state] = created.get(state, 0) + n
        return TickResult(jobs=fast.jobs + batch.planned, created=created, now=now, more=batch.more)

    def _fast_path(self, now: dt.datetime, floor: dt.datetime, ceiling: dt.datetime) -> TickResult:
        """Step 1's commonest case, in SQL: interval jobs with one due fire
        within grace and nothing for the overlap rule to decide, inserted and
        advanced in one statement. A full batch leaves no room for the
        planned path this tick (``more``: the next tick goes on)."""
        fast = TickResult(now=now)
        fast.jobs, fast.created, backlog = queries.dispatch_simple_intervals(
            now, self.batch_size, self.shard, floor, ceiling
        )
        if backlog:
            # Fires of a backlog held back by its first: missed, "no
            # dispatcher", as the planned path's (_record_missed).
            alert_events.record(
                [alert_events.Event(job, "missed", count=n) for job, n in backlog.items()], now
            )
        if fast.jobs >= self.batch_size:
            fast.more = True
        return fast

    def _planned_batch(
        self, now: dt.datetime, floor: dt.datetime, ceiling: dt.datetime, limit: int
    ) -> PlannedBatch | None:
        """Steps 1 to 4 for the jobs the fast path did not take: lock up to
        ``limit`` due jobs, read their runs running and waiting, plan each
        (plan_batch), insert the runs and advance the jobs, then pause the
        jobs whose schedule could not be read. None: nothing was due."""
        due = queries.lock_due_jobs(now, limit, self.shard)
        if not due:
            return None
        exclusive_ids = [j.id for j in due if j.overlap_policy != "allow"]
        active = queries.active_counts(exclusive_ids, floor, ceiling)
        batch = plan_batch(due, now, active, more=len(due) == limit)
        if batch.counted:
            # Stored per job by the insert below; one line per tick, not
            # per job: a recovery can count misses for thousands at once.
            log.warning(
                "misfires beyond the recorded cap, counted", extra={"counted": batch.counted}
            )
        batch.created = queries.insert_runs_and_advance(now, batch.advances, batch.runs)
        self._record_missed(now, batch)
        for job_id, problem in batch.unreadable:
            job_verbs.pause_unreadable(job_id, problem=problem)
        return batch

    def _record_missed(self, now: dt.datetime, batch: PlannedBatch) -> None:
        """Fires missed in this batch (recorded ``missed`` runs, and those
        counted past the cap) become ``missed`` alert events, in the tick's
        transaction (alerts/events.py)."""
        missed: Counter[int] = Counter()
        for position, _at, _kind, state, _reason in batch.runs:
            if state == MISSED:
                missed[position] += 1
        for position, advance in enumerate(batch.advances):
            if advance.missed_counted:
                missed[position] += advance.missed_counted
        if missed:
            alert_events.record(
                [
                    alert_events.Event(batch.advances[p].id, "missed", count=n)
                    for p, n in missed.items()
                ],
                now,
            )

    def _claimable_now(self, now: dt.datetime, batch: PlannedBatch) -> int:
        """How many of the batch's pending runs are claimable now. A jittered
        one that is not yet is remembered, for the tick at or after its
        ``available_at`` to announce."""
        claimable = 0
        for position, scheduled_at, _kind, state, _reason in batch.runs:
            if state == PENDING:
                available = scheduled_at + batch.advances[position].jitter
                if available <= now:
                    claimable += 1
                else:
                    heapq.heappush(self._later, available)
        return claimable

    def _pace(self, batch: PlannedBatch) -> None:
        """Lock only as many jobs next time as the budget lets this batch's
        rows per job through; back to the full batch once ticks are light."""
        per_job = len(batch.runs) / max(1, batch.planned)
        self._planned_limit = max(1, min(self.batch_size, int(ROW_BUDGET / max(1.0, per_job))))

    def _log_fires_not_run(self, now: dt.datetime, batch: PlannedBatch, started: float) -> None:
        """A recovery after an outage shows here, with how long this batch
        held its jobs' row locks (an owner's write to one of them waits that
        long)."""
        if batch.created.get("missed") or batch.created.get("skipped"):
            locked = round(time.monotonic() - started, 4)
            log.info(
                "fires not run",
                extra={
                    "now": now.isoformat(),
                    "jobs": batch.planned,
                    "locked_seconds": locked,
                    **batch.created,
                },
            )

    def _announce(self, now: dt.datetime, *, claimable: int) -> None:
        """At most one NOTIFY per tick, in its transaction (runs/notify.py):
        when it made runs claimable now, or when jittered runs of an earlier
        tick became claimable by now."""
        later_due = False
        while self._later and self._later[0] <= now:
            heapq.heappop(self._later)
            later_due = True
        if len(self._later) > MAX_LATER_WAKEUPS:
            self._later = heapq.nsmallest(MAX_LATER_WAKEUPS // 2, self._later)
        if claimable or later_due:
            notify.runs_claimable("dispatch")

    def seconds_until_later_runs(self) -> float | None:
        """Seconds until this dispatcher's next jittered run becomes claimable
        (None: none), by the database clock of the last tick."""
        if not self._later or self._last_tick is None:
            return None
        then, mono = self._last_tick
        return (self._later[0] - then).total_seconds() - (time.monotonic() - mono)

    # -- the loop -------------------------------------------------------------

    def run_once(self) -> TickResult:
        """Drain the due set batch by batch, then do housekeeping."""
        total = TickResult()
        while not self.stopping.is_set():
            result = self.tick()
            total.jobs += result.jobs
            total.now = result.now
            for state, n in result.created.items():
                total.created[state] = total.created.get(state, 0) + n
            if not result.more:
                break
            # Draining a long outage can take many ticks; the fleet row must
            # not go stale meanwhile, or health would call this dispatcher
            # dead while it is busiest.
            self._beat_if_due()
        self.housekeeping(fires=total.fires)
        return total

    def _beat_if_due(self) -> None:
        mono = time.monotonic()
        if mono >= self._next_beat:
            self._next_beat = mono + HEARTBEAT_EVERY
            self.registration.beat(stopping=self.stopping.is_set())

    def housekeeping(self, fires: int = 0) -> None:
        self._beat_if_due()
        mono = time.monotonic()
        if mono >= self._next_sample:
            self._next_sample = mono + LAG_SAMPLE_EVERY
            now = queries.db_now()
            earliest = queries.earliest_next_fire()
            lag = max(0.0, (now - earliest).total_seconds()) if earliest else 0.0
            fleet.record_lag(lag, fires, now)
        if mono >= self._next_housekeeping:
            self._next_housekeeping = mono + HOUSEKEEPING_EVERY
            self._auto_resume()
            self._reap_and_prune()

    def _auto_resume(self) -> None:
        from jobs.models import Channel, Job, JobState

        now = queries.db_now()
        for job in Job.objects.live().filter(state=JobState.PAUSED, resume_at__lte=now)[:100]:
            try:
                job_verbs.resume(job, channel=Channel.SYSTEM, due_by=now)
            except Exception:
                # Its schedule cannot be read: it stays paused, and the others resume.
                log.exception("auto-resume failed", extra={"job_id": str(job.pk)})
                continue
            log.info("auto-resumed", extra={"job_id": str(job.pk)})

    def _reap_and_prune(self) -> None:
        from accounts import throttles
        from runs import outcomes, retention

        now = queries.db_now()
        outcomes.cancel_stopped(now)
        outcomes.fail_exhausted(now)
        # The claims' and the ticks' partition pruning (runs/partitions.py).
        partitions.raise_active_floor(now)
        cutoff = now - dt.timedelta(days=settings.PUNCTUAL_RUN_RETENTION_DAYS)
        mono = time.monotonic()
        if mono >= self._next_partitions:
            self._next_partitions = mono + PARTITIONS_EVERY
            # Today's and the coming days' partitions exist before their
            # fires; days wholly past retention are dropped whole.
            partitions.ensure_partitions(now.astimezone(dt.UTC).date())
            partitions.drop_expired_days(cutoff)
        # What is left past retention (the default partition, days kept for
        # an unfinished run) goes row by row: never more than PRUNE_BUDGET
        # seconds away from dispatching.
        budget_end = time.monotonic() + PRUNE_BUDGET
        rows_before = retention.row_cutoff(cutoff)
        while retention.prune_batch(rows_before, PRUNE_BATCH) == PRUNE_BATCH:
            if time.monotonic() > budget_end or self.stopping.is_set():
                break
        # The audit events past their retention and the expired
        # Idempotency-Key answers, in what is left of the same budget.
        retention.prune_history(
            now,
            PRUNE_BATCH,
            keep_going=lambda: time.monotonic() <= budget_end and not self.stopping.is_set(),
        )
        fleet.prune(now)
        throttles.prune(now)

    def seconds_until_next_fire(self, now: dt.datetime | None = None) -> float:
        """How long to sleep: until this shard's earliest next fire, within
        [MIN_SLEEP, MAX_SLEEP]. ``now`` is for tests only."""
        wait = queries.seconds_to_earliest_fire(self.shard, now)
        later = self.seconds_until_later_runs()
        if later is not None:
            # Tick when a jittered run becomes claimable, to announce it.
            wait = later if wait is None else min(wait, later)
        if wait is None:
            return MAX_SLEEP
        return min(MAX_SLEEP, max(MIN_SLEEP, wait))

    def run_forever(self) -> None:
        """Loop until SIGTERM/SIGINT; survive the database going away."""
        self.install_signal_handlers()
        log.info(
            "dispatcher started",
            extra={"dispatcher": self.registration.name, **collector.settle()},
        )
        failures = 0
        while not self.stopping.is_set():
            try:
                self.run_once()
                wait = self.seconds_until_next_fire()
                failures = 0
            except Exception as exc:
                # Nothing is lost: a tick that did not commit changed nothing.
                # The database restarted or is unreachable: retry shortly.
                # Anything else is a bug or a row the code did not expect:
                # log it with its traceback and back off, so one failure
                # neither kills the process nor floods the log.
                if _database_unreachable(exc):
                    log.warning("database unavailable, retrying", extra={"error": str(exc)})
                    wait = MAX_SLEEP
                else:
                    failures += 1
                    wait = min(MAX_BACKOFF, MAX_SLEEP * 2 ** (failures - 1))
                    log.exception("dispatch round failed", extra={"retry_in": wait})
                close_old_connections()
                connection.close()
            self.stopping.wait(wait)
        with contextlib.suppress(DatabaseError):
            self.registration.leave()
        log.info("dispatcher stopped", extra={"dispatcher": self.registration.name})

    def install_signal_handlers(self) -> None:
        def stop(signum, frame):
            self.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)


def _database_unreachable(exc: Exception) -> bool:
    """Was ``exc`` the database going away, rather than a failing statement?"""
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    try:
        return connection.connection is None or not connection.is_usable()
    except Exception:
        return True
