"""The fire auditor: proof that nothing was lost, doubled or left stuck.

README "What it guarantees" promises one run per fire, one identity per fire, no stuck runs
and no silent gaps. ``audit()`` checks those promises against what is actually
in the database (and, optionally, against what a receiver actually got), over a
window ``[since, until)``. The fault suite (tests/processes/faults/) ends every
scenario with it, and operators run it as ``manage.py audit_fires``.

For each job, in order:

1. **Slots.** Every fire the schedule had in the audited range is accounted
   for by exactly one run, in any state (a live state, a terminal state, or
   ``missed``/``skipped``/``cancelled`` with a reason). The audited range of a
   job is ``[max(since, created_at, last schedule edit), min(until,
   next_fire_at))``: ``next_fire_at`` is how far the dispatchers have
   advanced, so every slot before it must exist. Time the job spent paused
   (or deleted) has no slots: a pause span runs from the job's last run before
   the pause to its resume, and fires inside it may or may not have a run.
2. **On schedule.** A ``scheduled`` or ``catch_up`` run must sit on a slot of
   the schedule. Manual and backfill runs are the owner's own and are aside.
3. **Reasons.** ``missed``, ``skipped`` and ``cancelled`` runs say why, and a
   ``missed`` or ``skipped`` run was never attempted.
4. **Stuck.** No run is ``running`` with its lease expired, or past its
   attempt deadline, by more than ``tolerance``: someone should have taken it
   over (README "What it guarantees"). This looks at every running run of the audited
   jobs, whatever its ``scheduled_at``.
5. **Deliveries** (with a receiver log, the loopback receiver's JSON lines):
   every ``succeeded`` webhook run was delivered at least once; every delivery
   of one fire ``(job_id, scheduled_at)`` carried the same ``webhook-id``;
   every ``webhook-id`` is a real run, and equals the run id in the body.

Reads happen jobs first, runs second: a dispatcher commits a fire's run and
the job's advance together, so runs read after the job always include every
slot before the ``next_fire_at`` that was read. Event times (pause, resume,
schedule edits) come from the application clock of whoever made the change;
``tolerance`` also widens pause spans by that much.
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

from core.db import db_now
from jobs.models import Job, JobState
from jobs.schedules import ScheduleError
from runs.models import Run, RunKind, RunState

UTC = dt.UTC
ONE_US = dt.timedelta(microseconds=1)
DEFAULT_TOLERANCE = dt.timedelta(seconds=10)
# A 1 s interval job audited over a whole day is 86,400 slots; past this many a
# job's remaining slots are not checked, and the report says so.
MAX_SLOTS_PER_JOB = 200_000
SCHEDULE_FIELDS = frozenset({"cron", "interval_seconds", "timezone", "start_at"})
FOREVER = dt.datetime.max.replace(tzinfo=UTC)
# Runs that claim a slot of the schedule; manual and backfill runs are the owner's.
_ON_SCHEDULE = (RunKind.SCHEDULED, RunKind.CATCH_UP)


class Kind:
    """Violation kinds, as the report and the tests name them."""

    GAP = "gap"  # a slot with no run
    DUPLICATE_RUN = "duplicate_run"  # two runs for one slot (the unique key is missing)
    OFF_SCHEDULE = "off_schedule"  # a scheduled/catch_up run at a time the schedule never fires
    NO_REASON = "no_reason"  # missed/skipped/cancelled without saying why
    NOT_RUN_BUT_ATTEMPTED = "not_run_but_attempted"  # missed/skipped yet attempted or delivered
    STUCK = "stuck"  # running past its lease or deadline, and nobody took it over
    UNDELIVERED = "undelivered"  # succeeded, but the receiver never saw it
    DUPLICATE_FIRE = "duplicate_fire"  # one fire delivered under two webhook-ids
    UNKNOWN_WEBHOOK_ID = "unknown_webhook_id"  # a delivery whose webhook-id is no run
    IDENTITY_MISMATCH = "identity_mismatch"  # webhook-id header != run id in the body


@dataclass(frozen=True)
class Violation:
    kind: str
    message: str
    job_id: str = ""
    run_id: str = ""
    scheduled_at: dt.datetime | None = None

    def __str__(self) -> str:
        parts = [f"{self.kind:<22}"]
        if self.job_id:
            parts.append(f"job {self.job_id}")
        if self.scheduled_at:
            parts.append(f"fire {_iso(self.scheduled_at)}")
        if self.run_id:
            parts.append(f"run {self.run_id}")
        return " ".join(parts) + f": {self.message}"


@dataclass
class AuditReport:
    since: dt.datetime
    until: dt.datetime
    now: dt.datetime
    violations: list[Violation] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    run_states: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    receiver_log: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    def of_kind(self, kind: str) -> list[Violation]:
        return [v for v in self.violations if v.kind == kind]

    def kinds(self) -> Counter:
        return Counter(v.kind for v in self.violations)

    def add(self, kind: str, message: str, **where) -> None:
        for key in ("job_id", "run_id"):
            if where.get(key) is not None:
                where[key] = str(where[key])
        self.violations.append(Violation(kind, message, **where))

    def render(self, limit: int = 100) -> str:
        c = self.counts
        states = ", ".join(f"{s} {n}" for s, n in sorted(self.run_states.items())) or "none"
        lines = [
            "Punctual fire audit",
            f"  window     {_iso(self.since)} .. {_iso(self.until)}"
            f" (database now {_iso(self.now)})",
            f"  jobs       {c['jobs']}",
            f"  slots      {c['slots']} expected, {c['slots_accounted']} accounted for,"
            f" {c['slots_paused']} inside pauses",
            f"  runs       {c['runs']}: {states}",
            f"  running    {c['running']} now, checked against lease and deadline",
        ]
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
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.kinds().items()))
        lines.append(f"FAIL: {len(self.violations)} violations ({kinds})")
        return "\n".join(lines)


def audit(
    since: dt.datetime,
    until: dt.datetime | None = None,
    *,
    job_ids: Iterable | None = None,
    receiver_log: str | Path | None = None,
    tolerance: dt.timedelta = DEFAULT_TOLERANCE,
    now: dt.datetime | None = None,
) -> AuditReport:
    """Audit every job (or ``job_ids``) over ``[since, until)``; ``until``
    defaults to the database's now. See the module docstring for the checks."""
    now = now or db_now()
    until = until or now
    for name, value in (("since", since), ("until", until)):
        if value.tzinfo is None:
            raise ValueError(f"{name} must be timezone-aware")
    if until <= since:
        raise ValueError("until must be after since")
    report = AuditReport(since=since, until=until, now=now)
    job_rows = Job.objects.all().order_by("created_at", "id")
    if job_ids is not None:
        job_rows = job_rows.filter(pk__in=list(job_ids))
    jobs = list(job_rows)  # read before the runs: see the module docstring
    report.counts["jobs"] = len(jobs)
    succeeded: dict[str, tuple] = {}
    not_run: dict[str, tuple] = {}
    for job in jobs:
        _audit_job(report, job, since, until, tolerance, succeeded, not_run)
    _audit_stuck(report, jobs, now, tolerance)
    if receiver_log is not None:
        report.receiver_log = str(receiver_log)
        entries = list(read_receiver_log(receiver_log))
        _audit_deliveries(report, entries, jobs, job_ids is not None, succeeded, not_run)
    return report


# -- slots and runs -----------------------------------------------------------


def _audit_job(report, job, since, until, tolerance, succeeded, not_run) -> None:
    try:
        schedule = job.schedule
    except ScheduleError as exc:
        report.notes.append(f"job {job.pk}: schedule not readable ({exc}); slots not checked")
        schedule = None
    events = list(
        job.events.order_by("created_at", "id").values_list("action", "changes", "created_at")
    )
    edits = [t for a, ch, t in events if a == "updated" and SCHEDULE_FIELDS.intersection(ch or {})]
    lo = max(since, job.created_at + ONE_US, *(e + ONE_US for e in edits))
    if edits and edits[-1] > since:
        report.notes.append(
            f"job {job.pk}: schedule edited at {_iso(edits[-1])}; audited from there on"
        )
    advancing = job.state == JobState.ACTIVE and job.deleted_at is None and job.next_fire_at
    hi = min(until, job.next_fire_at) if advancing else until

    runs: list[Any] = list(
        Run.objects.filter(job=job, scheduled_at__gte=since, scheduled_at__lt=until)
        .order_by("scheduled_at", "id")
        .values_list(
            "id", "scheduled_at", "kind", "state", "reason", "attempt", "target_kind", named=True
        )
    )
    report.counts["runs"] += len(runs)
    by_time: dict[dt.datetime, list[Any]] = defaultdict(list)
    for row in runs:
        run_id, at, kind, state, reason, attempt, target = row
        by_time[at].append(row)
        report.run_states[state] += 1
        if state in (RunState.MISSED, RunState.SKIPPED, RunState.CANCELLED) and not reason:
            report.add(
                Kind.NO_REASON,
                f"{state} without a reason",
                job_id=job.pk,
                run_id=run_id,
                scheduled_at=at,
            )
        if state in (RunState.MISSED, RunState.SKIPPED):
            not_run[str(run_id)] = (job.pk, at, state)
            if attempt:
                report.add(
                    Kind.NOT_RUN_BUT_ATTEMPTED,
                    f"{state} yet attempted {attempt} times",
                    job_id=job.pk,
                    run_id=run_id,
                    scheduled_at=at,
                )
        if state == RunState.SUCCEEDED and target == "webhook":
            succeeded[str(run_id)] = (job.pk, at)
    if schedule is None:
        return

    pauses = _pause_spans(job, events, [r for r in runs if r.kind in _ON_SCHEDULE], lo, tolerance)
    if pauses and pauses[-1][1] == FOREVER:
        # Paused (or deleted) for good: nothing after its last run is owed.
        hi = min(hi, pauses.pop()[0] + ONE_US)
    required: set[dt.datetime] = set()
    fires = schedule.fires_between(lo, hi, limit=MAX_SLOTS_PER_JOB) if hi > lo else []
    if len(fires) >= MAX_SLOTS_PER_JOB:
        report.notes.append(
            f"job {job.pk}: only the first {MAX_SLOTS_PER_JOB} slots checked (up to"
            f" {_iso(fires[-1])}); narrow the window to check the rest"
        )
    for fire in fires:
        if any(start < fire <= end for start, end in pauses):
            report.counts["slots_paused"] += 1
            continue
        required.add(fire)
        report.counts["slots"] += 1
        if fire in by_time:
            report.counts["slots_accounted"] += 1
        else:
            report.add(Kind.GAP, "no run for this slot", job_id=job.pk, scheduled_at=fire)

    for at, rows in by_time.items():
        if len(rows) > 1:
            ids = ", ".join(str(r.id) for r in rows)
            report.add(
                Kind.DUPLICATE_RUN,
                f"{len(rows)} runs for one fire: {ids}",
                job_id=job.pk,
                scheduled_at=at,
            )
        for row in rows:
            run_id, kind = row.id, row.kind
            if kind not in _ON_SCHEDULE or at in required:
                continue
            if schedule.next_fire(at - ONE_US) != at:
                report.add(
                    Kind.OFF_SCHEDULE,
                    f"a {kind} run at a time the schedule never fires",
                    job_id=job.pk,
                    run_id=run_id,
                    scheduled_at=at,
                )


def _pause_spans(job, events, on_schedule_runs, lo, tolerance) -> list[tuple]:
    """(start, end] spans in which the job did not advance: from its last run
    before a pause (or delete) to the resume, widened by ``tolerance``; an
    unfinished pause runs to the end of time."""
    spans = []
    times = [r.scheduled_at for r in on_schedule_runs]
    last_before = _last_before_fn(job, times, lo)
    paused_at = None
    for action, _changes, at in events:
        if action in ("paused", "deleted") and paused_at is None:
            paused_at = at
        elif action == "resumed" and paused_at is not None:
            spans.append((last_before(paused_at), at + tolerance))
            paused_at = None
    if paused_at is not None:
        spans.append((last_before(paused_at), FOREVER))
    elif job.state != JobState.ACTIVE or job.deleted_at is not None or not job.next_fire_at:
        # Stopped without an event (e.g. a bulk update): everything after the
        # last materialised fire is declined.
        last = times[-1] if times else lo - ONE_US
        spans.append((last, FOREVER))
    return spans


def _last_before_fn(job, times, lo):
    def last_before(moment: dt.datetime) -> dt.datetime:
        earlier = [t for t in times if t <= moment]
        if earlier:
            return earlier[-1]
        # Nothing in the window before the pause: ask for the latest run of the
        # job before it, or the start of the audited range.
        prior = (
            Run.objects.filter(job=job, scheduled_at__lte=moment, kind__in=_ON_SCHEDULE)
            .order_by("-scheduled_at")
            .values_list("scheduled_at", flat=True)
            .first()
        )
        return max(prior, lo - ONE_US) if prior else lo - ONE_US

    return last_before


# -- stuck runs -------------------------------------------------------------


def _audit_stuck(report, jobs, now, tolerance) -> None:
    rows = Run.objects.filter(job__in=[j.pk for j in jobs], state=RunState.RUNNING).values_list(
        "id", "job_id", "scheduled_at", "lease_owner", "lease_until", "deadline_at", "attempt"
    )
    for run_id, job_id, at, owner, lease_until, deadline, attempt in rows:
        report.counts["running"] += 1
        where = dict(job_id=job_id, run_id=run_id, scheduled_at=at)
        if lease_until is None:
            report.add(Kind.STUCK, f"running without a lease (attempt {attempt})", **where)
        elif lease_until < now - tolerance:
            late = (now - lease_until).total_seconds()
            report.add(
                Kind.STUCK,
                f"lease of {owner or '?'} (attempt {attempt}) expired {late:.1f} s ago"
                " and nobody took it over",
                **where,
            )
        elif deadline is not None and now > deadline + tolerance:
            late = (now - deadline).total_seconds()
            report.add(
                Kind.STUCK,
                f"{owner or '?'} holds it {late:.1f} s past its attempt deadline",
                **where,
            )


# -- the receiver's log -----------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One request start from the loopback receiver's log."""

    webhook_id: str
    run_id: str
    job_id: str
    scheduled_at: dt.datetime | None
    attempt: int | None
    t: float


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


def _audit_deliveries(report, entries, jobs, filtered, succeeded, not_run) -> None:
    job_ids = {str(j.pk) for j in jobs}
    in_scope = []
    for d in entries:
        if filtered and d.job_id not in job_ids:
            continue
        if d.scheduled_at is not None and not report.since <= d.scheduled_at < report.until:
            continue
        in_scope.append(d)
    report.counts["deliveries"] = len(in_scope)
    ids = {d.webhook_id for d in in_scope}
    report.counts["delivered_ids"] = len(ids)
    real = _existing_run_ids(ids)

    identities: dict[tuple, set[str]] = defaultdict(set)
    for d in in_scope:
        where = dict(
            job_id=d.job_id or None, run_id=d.webhook_id or None, scheduled_at=d.scheduled_at
        )
        if d.webhook_id not in real:
            report.add(
                Kind.UNKNOWN_WEBHOOK_ID,
                f"delivery with webhook-id {d.webhook_id or '(none)'!r}, which is no run",
                **where,
            )
        if d.run_id != d.webhook_id:
            report.add(
                Kind.IDENTITY_MISMATCH,
                f"webhook-id header but run_id {d.run_id!r} in the body",
                **where,
            )
        if d.webhook_id in not_run:
            report.add(
                Kind.NOT_RUN_BUT_ATTEMPTED, f"{not_run[d.webhook_id][2]} yet delivered", **where
            )
        if d.job_id and d.scheduled_at is not None:
            identities[(d.job_id, d.scheduled_at)].add(d.webhook_id)
    for (job_id, at), seen in sorted(identities.items()):
        if len(seen) > 1:
            report.add(
                Kind.DUPLICATE_FIRE,
                f"one fire delivered under {len(seen)} webhook-ids: {', '.join(sorted(seen))}",
                job_id=job_id,
                scheduled_at=at,
            )
    for run_id, (job_id, at) in succeeded.items():
        if run_id not in ids:
            report.add(
                Kind.UNDELIVERED,
                "succeeded, but the receiver never got it",
                job_id=job_id,
                run_id=run_id,
                scheduled_at=at,
            )


def _existing_run_ids(ids: set[str]) -> set[str]:
    valid = []
    for value in ids:
        try:
            valid.append(uuid.UUID(value))
        except ValueError:
            continue
    found: set[str] = set()
    for k in range(0, len(valid), 5000):
        chunk = valid[k : k + 5000]
        found.update(str(i) for i in Run.objects.filter(pk__in=chunk).values_list("id", flat=True))
    return found


# -- helpers ----------------------------------------------------------------


def _parse_iso(value) -> dt.datetime | None:
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _iso(value: dt.datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
