"""The fire auditor: proof that nothing was lost, doubled or left stuck.

docs/design/guarantees.md promises one run per fire, one identity per fire,
no stuck runs and no silent gaps. ``audit()`` checks those promises against
the database, and optionally against what a receiver actually got, trusting
neither the job row's ``next_fire_at`` nor any application clock. The fault
suite (tests/processes/faults/) ends every scenario with it, and operators run
it as ``manage.py audit_fires``. docs/operating/auditor.md states what it proves.

Its inputs, all read in database time:

* the schedule history (``jobs_schedulespan``, written by jobs/history.py in
  the transaction of every state or schedule change): which schedule was in
  force when, and whether the job was active, paused or deleted;
* the runs (``runs_run``), counted per span in SQL, never loaded one by one
  unless a span fails to reconcile;
* the fleet's heartbeats (``dispatch_processheartbeat``): whether a dispatcher
  or a worker was alive to do what was owed;
* optionally the loopback receiver's JSON lines (ops/loopback_receiver.py).

Rules (``Rule``), for each job:

1. **Slots of active spans.** For each ``active`` span, the slots of its
   schedule in ``(started_at, end]`` are accounted for exactly once: by a run
   (any kind and state: a backfill that reached a slot before the dispatcher
   did holds it, by the unique fire key) at the slot, or by the
   span's ``missed_count`` (fires a long recovery counted instead of listing).
   It is reconciled as a count: ``slots - runs == missed_count``; a parked
   job's skipped run counts as the slots it stands for (runs/models.py
   Run.fires, _covered). ``end`` is
   the span's end for a closed span (the pause, delete or edit that closed it
   planned every fire due by then). For the open span it is
   ``next_fire_at`` (every fire before it was planned, in the transaction
   that advanced it) or, while a dispatcher is alive, ``now - grace -
   tolerance`` if later: a dispatcher that is alive but stalled does not
   move the end of what is owed. A finished job (active, ``next_fire_at``
   NULL: every fire was planned) owes up to ``now``. No slot lies past a
   span's ``end_at``, and a one-off's span has one slot, its ``run_at``.
   More slots than accounted: ``gap`` (the slots without a run are
   listed). Fewer: ``count mismatch``.
2. **On schedule.** A ``scheduled`` or ``catch_up`` run sits on a slot of the
   schedule of the span that contains it; a ``scheduled`` run never lies in
   a paused or deleted span; ``catch_up`` runs in a paused span (made by a
   resume) number at most ``max_catchup``.
3. **Dispatched.** An active job's ``next_fire_at`` is not older than
   ``now - grace - tolerance`` while a dispatcher is alive.
4. **Not stuck.** A waiting webhook run that a worker could claim, while one
   is alive, does not stay waiting past ``tolerance``; a running run is not
   past its attempt deadline, nor past its lease while its worker is gone.
5. **Reasons.** ``missed``, ``skipped`` and ``cancelled`` runs say why, and a
   ``missed`` or ``skipped`` run was never attempted.
6. **Deliveries** (with the receiver's log): one webhook-id per fire; no
   delivery starts after its job's pause or delete committed (but that of a
   manual run or test delivery made during the pause); every
   ``succeeded`` webhook run arrived; every webhook-id is a run.
7. **A live fleet.** Rules 3 and 4 hold only while a dispatcher (a worker)
   is alive, so a fleet that died whole would pass them: when no
   dispatcher is running at all and fires of active jobs are overdue past
   their grace and the tolerance, that is ``no dispatcher``, with how many
   jobs and since when; when no worker is running and claimable webhook
   runs have waited past the tolerance, ``no worker``, the same way. A
   process that is up but has not been up for the tolerance yet is running
   (it is catching up): neither rule reports then.

Every query that compares runs with spans and jobs is one statement, so it
reads one snapshot: a dispatcher commits a fire's run together with the job's
advance, so no snapshot shows the advance without the run.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db.models import Count, Max, Q

from core.db import DB_NOW_SQL, db_now, dict_cursor
from core.sql import Placeholder
from dispatch.models import ProcessHeartbeat, ProcessKind
from jobs.schedules import Schedule, ScheduleError
from runs.leases import ITS_TURN, MAY_START

UTC = dt.UTC
ONE_US = dt.timedelta(microseconds=1)
DEFAULT_TOLERANCE = dt.timedelta(seconds=10)
# A process counts as alive when its heartbeat row was written this recently
# (dispatchers and workers beat every 2 s: dispatch/dispatcher.py, worker.py).
ALIVE_WITHIN = dt.timedelta(seconds=10)
# How many missing slots of one span are listed, and how many rule breaches
# of the row-level queries are fetched, before the report only counts.
LIST_MISSING = 10
MAX_LISTED = 10_000
# Listing a failed span's missing slots enumerates its schedule; past this
# many fires the listing stops (the count already proved the span wrong).
MAX_ENUMERATED = 2_000_000
FOREVER = dt.datetime.max.replace(tzinfo=UTC)
BEGINNING = dt.datetime(1970, 1, 1, tzinfo=UTC)


class Rule:
    """The rules, as the report and the tests name them."""

    GAP = "gap"  # a slot of an active span with no run, and not counted
    COUNT_MISMATCH = "count mismatch"  # a span counted more missed fires than lack a run
    DUPLICATE_RUN = "duplicate run"  # two runs for one fire (the unique key is gone)
    OFF_SCHEDULE = "off schedule"  # a run where its span's schedule never fires
    CATCH_UP_OVER_CAP = "catch-up over cap"  # more catch-up runs in a pause than max_catchup
    UNDISPATCHED = "undispatched"  # next_fire_at left behind while a dispatcher is alive
    NO_DISPATCHER = "no dispatcher"  # fires overdue, and no dispatcher running at all
    STUCK_WAITING = "stuck waiting"  # claimable, a worker alive, and nobody claims it
    NO_WORKER = "no worker"  # claimable webhook runs waiting, and no worker running at all
    STUCK_RUNNING = "stuck running"  # past its deadline, or its lease with its worker gone
    NO_REASON = "no reason"  # missed/skipped/cancelled without saying why
    NOT_RUN_BUT_ATTEMPTED = "not run but attempted"  # missed/skipped yet attempted or delivered
    TWO_IDS_FOR_ONE_FIRE = "two ids for one fire"  # one fire delivered under two webhook-ids
    DELIVERED_AFTER_PAUSE = "delivered after pause"  # a delivery started after the pause
    DELIVERED_AFTER_DELETE = "delivered after delete"  # a delivery started after the delete
    NEVER_DELIVERED = "never delivered"  # succeeded, but the receiver never got it
    UNKNOWN_ID = "unknown id"  # a delivery whose webhook-id is no run
    IDENTITY_MISMATCH = "identity mismatch"  # webhook-id header != run id in the body


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    job_id: str = ""
    run_id: str = ""
    scheduled_at: dt.datetime | None = None

    def __str__(self) -> str:
        parts = [f"{self.rule:<22}"]
        if self.job_id:
            parts.append(f"job {self.job_id}")
        if self.scheduled_at:
            parts.append(f"fire {_iso(self.scheduled_at)}")
        if self.run_id:
            parts.append(f"run {self.run_id}")
        return " ".join(parts) + f": {self.message}"


@dataclass
class AuditReport:
    since: dt.datetime | None
    until: dt.datetime | None
    now: dt.datetime
    tolerance: dt.timedelta = DEFAULT_TOLERANCE
    violations: list[Violation] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    run_states: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    receiver_log: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    def of_rule(self, rule: str) -> list[Violation]:
        return [v for v in self.violations if v.rule == rule]

    def rules(self) -> Counter:
        return Counter(v.rule for v in self.violations)

    def add(self, rule: str, message: str, **where: Any) -> None:
        for key in ("job_id", "run_id"):
            if where.get(key) is not None:
                where[key] = str(where[key])
            else:
                where.pop(key, None)
        self.violations.append(Violation(rule, message, **where))

    def render(self, limit: int = 100) -> str:
        c = self.counts
        states = ", ".join(f"{s} {n}" for s, n in sorted(self.run_states.items())) or "none"
        since = _iso(self.since) if self.since else "the beginning"
        until = _iso(self.until) if self.until else "now"
        lines = [
            "Punctual fire audit",
            f"  window     {since} .. {until} (database now {_iso(self.now)},"
            f" tolerance {self.tolerance.total_seconds():g} s)",
            f"  jobs       {c['jobs']}, {c['spans']} active spans audited",
            f"  slots      {c['slots']} expected: {c['slots_run']} with a run,"
            f" {c['slots_counted']} counted as missed",
            f"  runs       {c['runs']}: {states}",
            f"  fleet      {c['dispatchers_alive']} dispatchers and {c['workers_alive']}"
            " workers alive",
        ]
        if c["runs_before_history"]:
            lines.append(
                f"  history    {c['runs_before_history']} runs predate their job's schedule"
                " history: not checked against a schedule"
            )
        if self.receiver_log is not None:
            lines.append(
                f"  receiver   {c['deliveries']} deliveries of {c['delivered_ids']} webhook-ids"
                f" ({self.receiver_log})"
            )
        lines += [f"  note       {n}" for n in self.notes]
        if self.ok:
            lines.append(
                "OK: every fire accounted for exactly once, none off schedule, none stuck"
                + (", every success delivered under one webhook-id" if self.receiver_log else "")
            )
            return "\n".join(lines)
        lines.append(f"VIOLATIONS ({len(self.violations)})")
        lines += [f"  {v}" for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"  ... and {len(self.violations) - limit} more")
        rules = ", ".join(f"{k} {n}" for k, n in sorted(self.rules().items()))
        lines.append(f"FAIL: {len(self.violations)} violations ({rules})")
        return "\n".join(lines)


def count_slots(schedule: Schedule, after: dt.datetime, upto: dt.datetime) -> int:
    """How many fires f the schedule has with ``after < f <= upto``, exactly.

    The one place the auditor counts slots: jobs/schedules.py's counter is
    exact for both kinds of schedule (its cap is set past any real window).
    """
    if upto <= after:
        return 0
    return schedule.count_fires_between(after + ONE_US, upto + ONE_US, cap=10**15)


def audit(
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    *,
    job_ids: Iterable | None = None,
    receiver_log: str | Path | None = None,
    tolerance: dt.timedelta = DEFAULT_TOLERANCE,
    now: dt.datetime | None = None,
) -> AuditReport:
    """Audit every job (or ``job_ids``); ``since`` and ``until`` (both
    optional) restrict the fires audited to ``[since, until)``. See the module
    docstring for the rules."""
    now = now or db_now()
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise ValueError(f"{name} must be timezone-aware")
    if since is not None and since >= (until or now):
        raise ValueError("until must be after since")
    report = AuditReport(since=since, until=until, now=now, tolerance=tolerance)
    ids = [str(uuid.UUID(str(i))) for i in job_ids] if job_ids is not None else None
    scope = _Scope(
        ids=ids,
        since=since or BEGINNING,
        until=until or FOREVER,
        now=now,
        tolerance=tolerance,
        dispatcher_alive=False,
    )
    alive = _alive(now, tolerance)
    present = _present(now)
    scope.dispatcher_alive = bool(alive[ProcessKind.DISPATCHER])
    report.counts["dispatchers_alive"] = len(alive[ProcessKind.DISPATCHER])
    report.counts["workers_alive"] = len(alive[ProcessKind.WORKER])
    report.counts["jobs"] = _count_jobs(scope)

    _audit_duplicates(report, scope)
    _audit_spans(report, scope)
    _audit_runs(report, scope)
    _audit_undispatched(report, scope)
    _audit_stuck(report, scope, alive)
    _audit_dead_fleet(report, scope, present)
    if receiver_log is not None:
        report.receiver_log = str(receiver_log)
        _audit_deliveries(report, scope, list(read_receiver_log(receiver_log)))
    return report


# The runs ``r`` a statement over the audited range reads: all of them
# without --since/--until, so that a whole audit scans the runs table once
# instead of walking an index.
RANGE = Placeholder(
    "range",
    {
        "whole history": "",
        "--since/--until": "AND r.scheduled_at >= %(since)s AND r.scheduled_at < %(until)s",
    },
)


@dataclass
class _Scope:
    ids: list[str] | None
    since: dt.datetime
    until: dt.datetime
    now: dt.datetime
    tolerance: dt.timedelta
    dispatcher_alive: bool

    def runs_in_range(self, sql: str) -> str:
        """``sql`` with its ``{range}`` filled for the audited range (RANGE)."""
        bounded = self.since != BEGINNING or self.until != FOREVER
        return sql.format(range=RANGE["--since/--until" if bounded else "whole history"])

    def params(self, **extra: Any) -> dict[str, Any]:
        return {
            "all": self.ids is None,
            "ids": self.ids or [],
            "since": self.since,
            "until": self.until,
            "now": self.now,
            "tol": self.tolerance.total_seconds(),
            "dispatcher_alive": self.dispatcher_alive,
            **extra,
        }


# The audited jobs, with the grace the audit allows each: the largest the
# job ever had, as far as its edit events tell (a grace lowered a minute ago
# does not make fires planned under the old one late).
_JOBS = """
    jobs AS (
        SELECT j.id, j.state, j.deleted_at, j.next_fire_at, j.max_catchup,
               greatest(j.misfire_grace_seconds, coalesce((
                   SELECT max(greatest(
                       (e.changes -> 'misfire_grace_seconds' ->> 'from')::numeric,
                       (e.changes -> 'misfire_grace_seconds' ->> 'to')::numeric))
                   FROM jobs_jobevent AS e
                   WHERE e.job_id = j.id AND e.action = 'updated'
                     AND jsonb_typeof(e.changes -> 'misfire_grace_seconds') = 'object'
               ), 0)) AS grace
        FROM jobs_job AS j
        WHERE %(all)s OR j.id = ANY(%(ids)s::uuid[])
    )
"""


# Whether a run's time is a slot of the span ``s``'s schedule, as far as SQL
# can tell: exactly for an interval schedule (a whole number of intervals
# from its anchor, not before it: coalesce(start_at, anchor) is the anchor
# rule of jobs/schedules.py Schedule.for_job), and for a cron only that it is
# a whole minute not before start_at (cron fires are whole minutes).
#
# A one-off's one slot is its run_at, and no slot is past a span's end_at.
def _on_slot(s: str) -> str:
    return f"""
    ({s}.end_at IS NULL OR r.scheduled_at <= {s}.end_at) AND
    CASE WHEN {s}.run_at IS NOT NULL THEN r.scheduled_at = {s}.run_at
    WHEN {s}.interval_seconds IS NOT NULL THEN
        r.scheduled_at >= coalesce({s}.start_at, {s}.anchor)
        AND mod(extract(epoch FROM r.scheduled_at)
                - extract(epoch FROM coalesce({s}.start_at, {s}.anchor)),
                {s}.interval_seconds) = 0
    ELSE date_trunc('minute', r.scheduled_at) = r.scheduled_at
        AND ({s}.start_at IS NULL OR r.scheduled_at >= {s}.start_at)
    END
"""


# How many slots of the span ``b``'s window (lo, hi] the run ``r`` stands
# for: 1 for a run (its own fire), and for the skipped run of a parked job
# (runs/models.py Run.fires; only interval jobs are parked) its fires that
# fall in the window: scheduled_at and each one an interval later, ``fires``
# of them (NULL: the job is still parked, every one up to hi), none past the
# span's end_at.
def _covered(b: str) -> str:
    first = f"extract(epoch FROM {b}.lo - r.scheduled_at) / {b}.interval_seconds"
    last = f"extract(epoch FROM {b}.hi - r.scheduled_at) / {b}.interval_seconds"
    end = f"extract(epoch FROM {b}.end_at - r.scheduled_at) / {b}.interval_seconds"
    return f"""
    CASE WHEN r.fires = 1 OR {b}.interval_seconds IS NULL THEN 1
    ELSE greatest(0, least(floor({last}), coalesce(r.fires - 1, floor({last})),
                           coalesce(floor({end}), floor({last})))
                     - greatest(0, floor({first}) + 1) + 1)::int
    END
"""


# The rows that stand for more than one fire (run_fire_range_idx's predicate,
# as Django writes ~Q(fires=1)).
_A_RANGE = "NOT (r.fires = 1 AND r.fires IS NOT NULL)"


# Rule 1, counted: each active span that reaches into the audited range, its
# window (lo, hi] and the runs in it, in one statement (one snapshot). A
# parked job's skipped run stands for several slots (_covered), also when it
# lies before lo: ``ranges`` adds those (run_fire_range_idx; a parking never
# outlives its span, the verbs that close a span end it first).
# ``exact``: the window is the span's whole owed stretch, so its missed_count
# must match exactly; a window cut by --since/--until can only be checked for
# "no more missing than counted".
_SPAN_COUNTS = f"""
    WITH {_JOBS}, w AS (
        SELECT s.id, s.job_id, s.cron, s.interval_seconds, s.timezone, s.start_at,
               s.anchor, s.run_at, s.end_at, s.missed_count, s.started_at, s.ended_at,
               jb.grace,
               jb.next_fire_at,
               CASE
                   WHEN s.ended_at IS NOT NULL THEN s.ended_at
                   WHEN jb.state <> 'active' OR jb.deleted_at IS NOT NULL THEN s.started_at
                   WHEN %(dispatcher_alive)s THEN greatest(
                       %(now)s - make_interval(secs => jb.grace + %(tol)s),
                       jb.next_fire_at - interval '1 microsecond')
                   ELSE coalesce(jb.next_fire_at - interval '1 microsecond', %(now)s)
               END AS owed_to
        FROM jobs_schedulespan AS s JOIN jobs AS jb ON jb.id = s.job_id
        WHERE s.state = 'active' AND s.started_at < %(until)s
          AND (s.ended_at IS NULL OR s.ended_at >= %(since)s)
    ), b AS (
        SELECT w.*,
               greatest(w.started_at, %(since)s - interval '1 microsecond') AS lo,
               least(w.owed_to, %(until)s - interval '1 microsecond') AS hi
        FROM w
    )
    SELECT b.*, (b.lo = b.started_at AND b.hi = b.owed_to) AS exact,
           c.runs + ranges.covered AS runs, c.on_slot + ranges.covered AS on_slot,
           c.on_slot_planned + ranges.covered AS on_slot_planned
    FROM b LEFT JOIN LATERAL (
        SELECT coalesce(sum({_covered("b")}) FILTER (
                   WHERE r.kind IN ('scheduled', 'catch_up')), 0) AS runs,
               coalesce(sum({_covered("b")}) FILTER (WHERE {_on_slot("b")}), 0) AS on_slot,
               coalesce(sum({_covered("b")}) FILTER (
                   WHERE r.kind IN ('scheduled', 'catch_up') AND {_on_slot("b")}
               ), 0) AS on_slot_planned
        FROM runs_run AS r
        WHERE r.job_id = b.job_id AND r.scheduled_at > b.lo AND r.scheduled_at <= b.hi
    ) AS c ON true
    LEFT JOIN LATERAL (
        SELECT coalesce(sum({_covered("b")}), 0) AS covered
        FROM runs_run AS r
        WHERE r.job_id = b.job_id AND r.scheduled_at > b.started_at
          AND r.scheduled_at <= b.lo AND {_A_RANGE} AND {_on_slot("b")}
    ) AS ranges ON true
    WHERE b.hi > b.lo
    ORDER BY b.job_id, b.started_at
"""


# One run per fire is the unique index run_one_per_fire (runs/models.py):
# while it is there and valid, no fire can have two runs, and the counts
# below need not look for them. Without it they are searched for.
_FIRE_KEY_HOLDS = """
    SELECT EXISTS (
        SELECT 1 FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
        WHERE c.relname = 'run_one_per_fire' AND i.indisunique AND i.indisvalid
          AND i.indrelid = 'runs_run'::regclass
    ) AS holds
"""
_DUPLICATES = f"""
    WITH {_JOBS}
    SELECT r.job_id, r.scheduled_at, count(*) AS runs
    FROM runs_run AS r JOIN jobs ON jobs.id = r.job_id
    WHERE true {{range}}
    GROUP BY r.job_id, r.scheduled_at HAVING count(*) > 1
    LIMIT {MAX_LISTED}
"""


def _audit_duplicates(report: AuditReport, scope: _Scope) -> None:
    with dict_cursor() as cur:
        cur.execute(_FIRE_KEY_HOLDS)
        if cur.fetchone()["holds"]:
            return
        report.notes.append("the unique index run_one_per_fire is missing or invalid")
        cur.execute(scope.runs_in_range(_DUPLICATES), scope.params())
        rows = cur.fetchall()
    for row in rows:
        report.add(
            Rule.DUPLICATE_RUN,
            f"{row['runs']} runs for one fire",
            job_id=row["job_id"],
            scheduled_at=row["scheduled_at"],
        )


def _audit_spans(report: AuditReport, scope: _Scope) -> None:
    with dict_cursor() as cur:
        cur.execute(_SPAN_COUNTS, scope.params())
        spans = cur.fetchall()
    for span in spans:
        report.counts["spans"] += 1
        try:
            schedule = _schedule(span)
        except ScheduleError as exc:
            report.notes.append(
                f"job {span['job_id']}: a schedule in its history cannot be read ({exc});"
                " its slots are not checked"
            )
            continue
        slots = count_slots(schedule, span["lo"], span["hi"])
        on_slot, counted = span["on_slot"], span["missed_count"]
        report.counts["slots"] += slots
        report.counts["slots_run"] += on_slot
        missing = slots - on_slot
        report.counts["slots_counted"] += min(max(missing, 0), counted)
        # Counted fires are fires without a planned run; an owner's backfill
        # may later give one of them a run too (it then has both). So the
        # slots without any run are at most the count, and the slots without
        # a planned run at least the count.
        unplanned = slots - span["on_slot_planned"]
        if missing <= counted <= unplanned or (not span["exact"] and 0 <= missing <= counted):
            continue
        if missing <= counted:
            report.add(
                Rule.COUNT_MISMATCH,
                f"the span from {_iso(span['started_at'])} counts {counted} missed fires, but"
                f" only {unplanned} of its {slots} slots up to {_iso(span['hi'])} lack a"
                " planned run",
                job_id=span["job_id"],
            )
            continue
        _list_gaps(report, span, schedule, slots, on_slot, counted)


def _list_gaps(report, span, schedule: Schedule, slots: int, on_slot: int, counted: int) -> None:
    """The slots of a span that failed to reconcile that have no run: the
    oldest ``counted`` of them are the counted ones (a recovery counts its
    oldest fires), the rest are listed, up to LIST_MISSING."""
    with dict_cursor() as cur:
        cur.execute(
            "SELECT scheduled_at, fires FROM runs_run AS r WHERE job_id = %s"
            " AND ((scheduled_at > %s AND scheduled_at <= %s)"
            f" OR (scheduled_at > %s AND {_A_RANGE}))",
            [span["job_id"], span["lo"], span["hi"], span["started_at"]],
        )
        taken: set[dt.datetime] = set()
        for row in cur.fetchall():
            taken.update(_fires_of(row, span))
    unaccounted = slots - on_slot - counted
    skip, seen = counted, 0
    listed: list[dt.datetime] = []
    for fire in schedule.iter_fires(span["lo"]):
        seen += 1
        if fire > span["hi"] or len(listed) >= LIST_MISSING or seen > MAX_ENUMERATED:
            break
        if fire in taken:
            continue
        if skip:
            skip -= 1
            continue
        listed.append(fire)
    where = f"{slots} slots, {on_slot} with a run, {counted} counted"
    for fire in listed:
        report.add(
            Rule.GAP,
            f"no run and not counted ({unaccounted} unaccounted in the span from"
            f" {_iso(span['started_at'])}: {where})",
            job_id=span["job_id"],
            scheduled_at=fire,
        )
    if not listed:
        report.add(
            Rule.GAP,
            f"{unaccounted} fires unaccounted in the span from {_iso(span['started_at'])}"
            f" ({where})",
            job_id=span["job_id"],
        )


# Rules 2 and 5, row by row in one scan: each run of the audited range with
# the span that contains it (spans meet end to end, so at most one does).
# Only the rows that break a rule come back.
_RUN_BREACHES = f"""
    WITH {_JOBS}
    SELECT r.id, r.job_id, r.scheduled_at, r.kind, r.state, r.reason, r.attempt,
           s.id AS span_id, s.state AS span_state, s.started_at AS span_started,
           (s.id IS NOT NULL AND r.kind IN ('scheduled', 'catch_up')
            AND (s.state = 'deleted' OR (s.state = 'paused' AND r.kind = 'scheduled')
                 OR NOT ({_on_slot("s")}))) AS off_schedule,
           (r.state IN ('missed', 'skipped', 'cancelled') AND r.reason = '') AS no_reason,
           (r.state IN ('missed', 'skipped') AND (r.attempt > 0
            OR EXISTS (SELECT 1 FROM runs_attempt AS a WHERE a.run_id = r.id))) AS attempted
    FROM runs_run AS r
    JOIN jobs ON jobs.id = r.job_id
    LEFT JOIN jobs_schedulespan AS s
        ON s.job_id = r.job_id AND r.scheduled_at > s.started_at
       AND (s.ended_at IS NULL OR r.scheduled_at <= s.ended_at)
    WHERE true {{range}}
      AND ((s.id IS NOT NULL AND r.kind IN ('scheduled', 'catch_up')
            AND (s.state = 'deleted' OR (s.state = 'paused' AND r.kind = 'scheduled')
                 OR NOT ({_on_slot("s")})))
           OR (r.state IN ('missed', 'skipped', 'cancelled') AND r.reason = '')
           OR (r.state IN ('missed', 'skipped') AND (r.attempt > 0
               OR EXISTS (SELECT 1 FROM runs_attempt AS a WHERE a.run_id = r.id))))
    ORDER BY r.job_id, r.scheduled_at
    LIMIT {MAX_LISTED}
"""

# The run states of the audited range, and the runs that predate their job's
# first span (its history did not exist yet).
_RUN_TOTALS = f"""
    WITH {_JOBS}, first AS (
        SELECT job_id, min(started_at) AS started_at FROM jobs_schedulespan GROUP BY job_id
    )
    SELECT r.state, count(*) AS runs,
           count(*) FILTER (
               WHERE first.started_at IS NULL OR r.scheduled_at <= first.started_at
           ) AS before_history
    FROM runs_run AS r JOIN jobs ON jobs.id = r.job_id
    LEFT JOIN first ON first.job_id = r.job_id
    WHERE true {{range}}
    GROUP BY r.state
"""

# Rule 2, catch-up runs: the pauses in which a resume made more catch-up
# runs than the job's max_catchup allows.
_CATCH_UP_PER_PAUSE = f"""
    WITH {_JOBS}
    SELECT s.job_id, s.started_at, jobs.max_catchup, count(*) AS catch_up
    FROM runs_run AS r
    JOIN jobs ON jobs.id = r.job_id
    JOIN jobs_schedulespan AS s
        ON s.job_id = r.job_id AND s.state = 'paused' AND r.scheduled_at > s.started_at
       AND (s.ended_at IS NULL OR r.scheduled_at <= s.ended_at)
    WHERE r.kind = 'catch_up' {{range}}
    GROUP BY s.id, s.job_id, s.started_at, jobs.max_catchup
    HAVING count(*) > jobs.max_catchup
"""


def _audit_runs(report: AuditReport, scope: _Scope) -> None:
    params = scope.params()
    with dict_cursor() as cur:
        cur.execute(scope.runs_in_range(_RUN_TOTALS), params)
        for row in cur.fetchall():
            report.run_states[row["state"]] += row["runs"]
            report.counts["runs"] += row["runs"]
            report.counts["runs_before_history"] += row["before_history"]
        cur.execute(scope.runs_in_range(_RUN_BREACHES), params)
        breaches = cur.fetchall()
        cur.execute(scope.runs_in_range(_CATCH_UP_PER_PAUSE), params)
        over_cap = cur.fetchall()
    for row in breaches:
        where = dict(job_id=row["job_id"], run_id=row["id"], scheduled_at=row["scheduled_at"])
        if row["off_schedule"]:
            if row["span_state"] == "deleted":
                report.add(Rule.OFF_SCHEDULE, f"a {row['kind']} run after the delete", **where)
            elif row["span_state"] == "paused" and row["kind"] == "scheduled":
                report.add(Rule.OFF_SCHEDULE, "a scheduled run inside a pause", **where)
            else:
                report.add(
                    Rule.OFF_SCHEDULE,
                    f"a {row['kind']} run at a time its span's schedule never fires",
                    **where,
                )
        if row["no_reason"]:
            report.add(Rule.NO_REASON, f"{row['state']} without a reason", **where)
        if row["attempted"]:
            report.add(
                Rule.NOT_RUN_BUT_ATTEMPTED,
                f"{row['state']} yet attempted ({row['attempt']} attempts counted)",
                **where,
            )
    if len(breaches) >= MAX_LISTED:
        report.notes.append(f"only the first {MAX_LISTED} run-level breaches were fetched")
    for row in over_cap:
        report.add(
            Rule.CATCH_UP_OVER_CAP,
            f"{row['catch_up']} catch-up runs in the pause from {_iso(row['started_at'])},"
            f" at most {row['max_catchup']} allowed",
            job_id=row["job_id"],
        )


# Rule 3: active jobs whose next fire is older than their grace allows.
_OVERDUE_JOBS = f"""
    WITH {_JOBS}
    SELECT {{columns}} FROM jobs
    WHERE state = 'active' AND deleted_at IS NULL
      AND next_fire_at < %(now)s - make_interval(secs => grace + %(tol)s)
"""
_UNDISPATCHED = (
    _OVERDUE_JOBS.format(columns="id, next_fire_at, grace")
    + f"    ORDER BY next_fire_at\n    LIMIT {MAX_LISTED}\n"
)
# Rule 7, no dispatcher: how many of them there are, and the oldest fire.
_OVERDUE_TOTAL = _OVERDUE_JOBS.format(columns="count(*) AS n, min(next_fire_at) AS oldest")


def _audit_undispatched(report: AuditReport, scope: _Scope) -> None:
    if not scope.dispatcher_alive:
        return
    with dict_cursor() as cur:
        cur.execute(_UNDISPATCHED, scope.params())
        rows = cur.fetchall()
    for row in rows:
        late = (scope.now - row["next_fire_at"]).total_seconds()
        report.add(
            Rule.UNDISPATCHED,
            f"due {late:.1f} s ago (grace {row['grace']} s) and a dispatcher is alive",
            job_id=row["id"],
            scheduled_at=row["next_fire_at"],
        )


def _alive(now: dt.datetime, tolerance: dt.timedelta) -> dict[str, dict[str, Any]]:
    """The live processes by kind: name -> row. Alive: beat within
    ALIVE_WITHIN, not stopping, and up for ``tolerance`` (a process that just
    started has not had the time to catch up yet). The fleet rows do not say
    which shard a dispatcher serves: any live dispatcher counts for every job."""
    alive: dict[str, dict[str, Any]] = {ProcessKind.DISPATCHER: {}, ProcessKind.WORKER: {}}
    rows = ProcessHeartbeat.objects.filter(
        last_seen__gte=now - ALIVE_WITHIN, stopping=False, started_at__lte=now - tolerance
    ).values("kind", "name", "last_seen")
    for row in rows:
        alive.setdefault(row["kind"], {})[row["name"]] = row
    return alive


# Rule 4, waiting: webhook runs the worker claim (runs/leases.py CLAIM_WAITING)
# would take, claimable for longer than the tolerance: due, allowed to start
# (runs/leases.py RUN_MAY_START), and not held back by the overlap rule.
_WAITING_RUNS = f"""
    WITH {_JOBS}
    SELECT {{columns}}
    FROM runs_run AS r JOIN jobs_job AS j ON j.id = r.job_id JOIN jobs ON jobs.id = j.id
    WHERE r.state IN ('pending', 'retrying') AND r.target_kind = 'webhook'
      AND r.available_at <= %(now)s - make_interval(secs => %(tol)s)
      {MAY_START}
      AND {ITS_TURN}
"""
_STUCK_WAITING = (
    _WAITING_RUNS.format(columns="r.id, r.job_id, r.scheduled_at, r.state, r.available_at")
    + f"    ORDER BY r.available_at\n    LIMIT {MAX_LISTED}\n"
)
# Rule 7, no worker: how many of them there are, and since when the oldest.
_WAITING_TOTAL = _WAITING_RUNS.format(columns="count(*) AS n, min(r.available_at) AS oldest")

# Rule 4, running: every running run of the audited jobs, whatever its fire.
_RUNNING = f"""
    WITH {_JOBS}
    SELECT r.id, r.job_id, r.scheduled_at, r.lease_owner, r.lease_until, r.deadline_at,
           r.attempt
    FROM runs_run AS r JOIN jobs ON jobs.id = r.job_id
    WHERE r.state = 'running'
"""


def _audit_stuck(report: AuditReport, scope: _Scope, alive: dict[str, dict[str, Any]]) -> None:
    now, tol = scope.now, scope.tolerance
    workers = alive[ProcessKind.WORKER]
    with dict_cursor() as cur:
        cur.execute(_RUNNING, scope.params())
        running = cur.fetchall()
        waiting = []
        if workers:
            cur.execute(_STUCK_WAITING, scope.params())
            waiting = cur.fetchall()
    report.counts["running"] = len(running)
    for row in running:
        where = dict(job_id=row["job_id"], run_id=row["id"], scheduled_at=row["scheduled_at"])
        owner, attempt = row["lease_owner"] or "?", row["attempt"]
        deadline, lease = row["deadline_at"], row["lease_until"]
        if lease is None:
            report.add(Rule.STUCK_RUNNING, f"running without a lease (attempt {attempt})", **where)
        elif deadline is not None and now > deadline + tol:
            late = (now - deadline).total_seconds()
            report.add(
                Rule.STUCK_RUNNING,
                f"{owner} holds it {late:.1f} s past its attempt deadline (attempt {attempt})",
                **where,
            )
        elif lease < now - tol and row["lease_owner"] not in workers:
            late = (now - lease).total_seconds()
            report.add(
                Rule.STUCK_RUNNING,
                f"lease of {owner} (attempt {attempt}) expired {late:.1f} s ago, its worker"
                " is gone, and nobody took it over",
                **where,
            )
    for row in waiting:
        late = (now - row["available_at"]).total_seconds()
        report.add(
            Rule.STUCK_WAITING,
            f"{row['state']} and claimable for {late:.1f} s while {len(workers)} workers are alive",
            job_id=row["job_id"],
            run_id=row["id"],
            scheduled_at=row["scheduled_at"],
        )


def _present(now: dt.datetime) -> dict[str, dict[str, Any]]:
    """By kind: whether any process of it is running (it beat within
    ALIVE_WITHIN and is not stopping, however long it has been up), and when
    one was last seen, stopping or not (None: never, or forgotten)."""
    running = Q(last_seen__gte=now - ALIVE_WITHIN, stopping=False)
    rows = (
        ProcessHeartbeat.objects.values("kind")
        .annotate(seen=Max("last_seen"), running=Count("name", filter=running))
        .order_by()
    )
    present: dict[str, dict[str, Any]] = {
        kind: {"running": False, "last_seen": None}
        for kind in (ProcessKind.DISPATCHER, ProcessKind.WORKER)
    }
    for row in rows:
        present[row["kind"]] = {"running": row["running"] > 0, "last_seen": row["seen"]}
    return present


def _audit_dead_fleet(
    report: AuditReport, scope: _Scope, present: dict[str, dict[str, Any]]
) -> None:
    """Rule 7: what is owed while no process of the kind that owes it runs."""
    checks = [
        (ProcessKind.DISPATCHER, _OVERDUE_TOTAL, Rule.NO_DISPATCHER),
        (ProcessKind.WORKER, _WAITING_TOTAL, Rule.NO_WORKER),
    ]
    for kind, sql, rule in checks:
        if present[kind]["running"]:
            continue
        with dict_cursor() as cur:
            cur.execute(sql, scope.params())
            row = cur.fetchone()
        if not row["n"]:
            continue
        seen = present[kind]["last_seen"]
        gone = f"last seen {_iso(seen)}" if seen else "none seen"
        tol = f"{scope.tolerance.total_seconds():g} s"
        if kind == ProcessKind.DISPATCHER:
            what = (
                f"{row['n']} active jobs overdue past their grace and the {tol} tolerance,"
                f" the oldest fire due since {_iso(row['oldest'])}"
            )
        else:
            what = (
                f"{row['n']} claimable webhook runs waiting past the {tol} tolerance,"
                f" the oldest claimable since {_iso(row['oldest'])}"
            )
        report.add(rule, f"no {kind} is running ({gone}): {what}")


# -- the receiver's log -----------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One request start from the loopback receiver's log."""

    webhook_id: str
    run_id: str
    job_id: str
    scheduled_at: dt.datetime | None
    attempt: int | None
    t: float  # arrival, seconds since the epoch by the receiver's clock


def read_receiver_log(path: str | Path) -> Iterator[Delivery]:
    """The ``start`` lines of a loopback receiver log (ops/loopback_receiver.py).

    A line that is not JSON (the receiver may be writing it right now) is skipped.
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("event") != "start":
                continue
            yield Delivery(
                webhook_id=str(entry.get("webhook_id") or ""),
                run_id=str(entry.get("run_id") or ""),
                job_id=str(entry.get("job_id") or ""),
                scheduled_at=_parse_iso(entry.get("scheduled_at")),
                attempt=entry.get("attempt"),
                t=float(entry.get("t") or 0.0),
            )


# The runs a log names, and their jobs' pause and delete spans.
_DELIVERED_RUNS = """
    SELECT id, job_id, scheduled_at, state, kind FROM runs_run WHERE id = ANY(%(ids)s::uuid[])
"""
_STOP_SPANS = """
    SELECT job_id, state, started_at, ended_at FROM jobs_schedulespan
    WHERE job_id = ANY(%(ids)s::uuid[]) AND state IN ('paused', 'deleted')
"""
_SUCCEEDED = f"""
    WITH {_JOBS}
    SELECT r.id, r.job_id, r.scheduled_at FROM runs_run AS r JOIN jobs ON jobs.id = r.job_id
    WHERE r.state = 'succeeded' AND r.target_kind = 'webhook' {{range}}
"""
# The test-only offset of the database clock (core/db.py): the receiver's
# clock is compared with database times through it.
_CLOCK_OFFSET = f"SELECT extract(epoch FROM {DB_NOW_SQL} - statement_timestamp()) AS offset"


def _audit_deliveries(report: AuditReport, scope: _Scope, entries: list[Delivery]) -> None:
    in_scope = [
        d
        for d in entries
        if (scope.ids is None or d.job_id in scope.ids)
        and (d.scheduled_at is None or scope.since <= d.scheduled_at < scope.until)
    ]
    report.counts["deliveries"] = len(in_scope)
    ids = {d.webhook_id for d in in_scope}
    report.counts["delivered_ids"] = len(ids)
    valid = [i for i in ids if _is_uuid(i)]
    delivered_jobs = sorted({d.job_id for d in in_scope if _is_uuid(d.job_id)})
    with dict_cursor() as cur:
        cur.execute(_DELIVERED_RUNS, {"ids": valid})
        runs = {str(r["id"]): r for r in cur.fetchall()}
        cur.execute(_STOP_SPANS, {"ids": delivered_jobs})
        stops: dict[str, list[dict]] = defaultdict(list)
        for span in sorted(cur.fetchall(), key=lambda span: span["started_at"]):
            spans = stops[str(span["job_id"])]
            # Where the pause began: a paused span that follows another one
            # directly (the schedule was edited while paused) continues it.
            before = spans[-1] if spans else None
            continued = (
                before is not None
                and before["state"] == span["state"] == "paused"
                and before["ended_at"] == span["started_at"]
            )
            span["pause_began"] = (
                before["pause_began"] if before is not None and continued else span["started_at"]
            )
            spans.append(span)
        cur.execute(scope.runs_in_range(_SUCCEEDED), scope.params())
        succeeded = cur.fetchall()
        cur.execute(_CLOCK_OFFSET)
        offset = float(cur.fetchone()["offset"])

    identities: dict[tuple, set[str]] = defaultdict(set)
    for d in in_scope:
        where = dict(
            job_id=d.job_id or None, run_id=d.webhook_id or None, scheduled_at=d.scheduled_at
        )
        run = runs.get(d.webhook_id)
        if run is None:
            report.add(
                Rule.UNKNOWN_ID,
                f"delivery with webhook-id {d.webhook_id or '(none)'!r}, which is no run",
                **where,
            )
        elif run["state"] in ("missed", "skipped"):
            report.add(Rule.NOT_RUN_BUT_ATTEMPTED, f"{run['state']} yet delivered", **where)
        if d.run_id != d.webhook_id:
            report.add(
                Rule.IDENTITY_MISMATCH,
                f"webhook-id header but run_id {d.run_id!r} in the body",
                **where,
            )
        if d.job_id and d.scheduled_at is not None:
            identities[(d.job_id, d.scheduled_at)].add(d.webhook_id)
        arrived = dt.datetime.fromtimestamp(d.t + offset, UTC)
        for span in stops.get(d.job_id, ()):
            # A delivery that arrived after the span began (plus the
            # tolerance, for the two clocks and the request in flight) and
            # before it ended started after the pause or delete committed.
            began, ended = span["started_at"], span["ended_at"] or FOREVER
            if run is not None and _made_in_pause(run, span):
                continue
            if began + scope.tolerance < arrived <= ended:
                rule = (
                    Rule.DELIVERED_AFTER_DELETE
                    if span["state"] == "deleted"
                    else Rule.DELIVERED_AFTER_PAUSE
                )
                late = (arrived - began).total_seconds()
                report.add(
                    rule,
                    f"arrived {late:.1f} s after the {span['state']} span began"
                    f" ({_iso(began)}, database time)",
                    **where,
                )
    for (job_id, at), seen in sorted(identities.items()):
        if len(seen) > 1:
            report.add(
                Rule.TWO_IDS_FOR_ONE_FIRE,
                f"one fire delivered under {len(seen)} webhook-ids: {', '.join(sorted(seen))}",
                job_id=job_id,
                scheduled_at=at,
            )
    for row in succeeded:
        if str(row["id"]) not in ids:
            report.add(
                Rule.NEVER_DELIVERED,
                "succeeded, but the receiver never got it",
                job_id=row["job_id"],
                run_id=row["id"],
                scheduled_at=row["scheduled_at"],
            )


# -- helpers ----------------------------------------------------------------


def _fires_of(row: dict[str, Any], span: dict[str, Any]) -> Iterator[dt.datetime]:
    """The fires a run stands for (runs/models.py Run.fires), up to the
    span's window end: its own, or a parked job's declined ones."""
    yield row["scheduled_at"]
    if row["fires"] == 1 or not span["interval_seconds"]:
        return
    step = dt.timedelta(seconds=span["interval_seconds"])
    k, fire = 1, row["scheduled_at"] + step
    while (row["fires"] is None or k < row["fires"]) and fire <= span["hi"]:
        yield fire
        k, fire = k + 1, fire + step


def _made_in_pause(run: dict[str, Any], span: dict[str, Any]) -> bool:
    """Whether ``run`` is a manual run or test delivery made during the pause
    ``span``: one that may be delivered while its job is paused (runs/leases.py
    RUN_MAY_START)."""
    return (
        span["state"] == "paused"
        and run["kind"] in ("manual", "test")
        and run["scheduled_at"] >= span["pause_began"]
    )


def _count_jobs(scope: _Scope) -> int:
    with dict_cursor() as cur:
        cur.execute(f"WITH {_JOBS} SELECT count(*) AS n FROM jobs", scope.params())
        return int(cur.fetchone()["n"])


def _schedule(span: dict[str, Any]) -> Schedule:
    return Schedule.for_job(
        cron=span["cron"],
        interval_seconds=span["interval_seconds"],
        timezone=span["timezone"],
        start_at=span["start_at"],
        created_at=span["anchor"],
        run_at=span["run_at"],
        end_at=span["end_at"],
    )


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _parse_iso(value: object) -> dt.datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _iso(value: dt.datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
