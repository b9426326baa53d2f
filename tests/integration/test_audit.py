"""The fire auditor (ops/audit.py) and ``manage.py audit_fires``.

Three groups:

- a clean history passes, and each rule, handed a real violation, makes the
  command exit 1 and names the rule;
- the mutation check: each failure class the old auditor called OK is put
  back, exactly as the bug wrote it (direct SQL on a history made by the real
  dispatcher and verbs), and the command fails naming it;
- no false alarms: long recoveries through the real ``Dispatcher.tick`` and
  pause/edit/resume/delete sequences through the real verbs audit clean.

Time moves by the database clock's test offset (core/db.py,
``punctual.clock_offset``), set for this test's session only, so every
verb, tick and audit agrees on "now" as production would.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import uuid

import pytest
from django.core.management import call_command, execute_from_command_line
from django.core.management.base import CommandError
from django.db import connection

from core.db import DB_NOW_SQL, db_now
from dispatch.dispatcher import Dispatcher
from dispatch.models import ProcessHeartbeat
from jobs.models import Job, ScheduleSpan
from ops.audit import Rule, audit
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job, rewrite_job

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)


def iso(value: dt.datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def shift(seconds: float) -> dt.datetime:
    """Move the database clock (this session only) to ``seconds`` past the
    real one; returns the new database now."""
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('punctual.clock_offset', %s, false)", [f"{seconds} s"])
    return db_now()


def receiver_clock(db_time: dt.datetime) -> float:
    """``db_time`` as the receiver's clock reads it: without the test offset."""
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT extract(epoch FROM %s - ({DB_NOW_SQL} - statement_timestamp()))", [db_time]
        )
        return float(cur.fetchone()[0])


def beat(
    kind: str,
    name: str | None = None,
    *,
    up: dt.timedelta = dt.timedelta(hours=1),
    stopping: bool = False,
) -> str:
    """A live fleet member: its heartbeat row, up for ``up`` (an hour), seen
    just now."""
    now = db_now()
    name = name or f"{kind}-{uuid.uuid4().hex[:6]}"
    ProcessHeartbeat.objects.update_or_create(
        name=name,
        defaults=dict(
            kind=kind,
            host="test",
            pid=os.getpid(),
            started_at=now - up,
            last_seen=now,
            stopping=stopping,
        ),
    )
    return name


def minute_job(owner, age: dt.timedelta = 10 * MIN, **fields) -> Job:
    """A 60 s interval job created ``age`` ago (its history from then on),
    dispatched minute by minute up to now, as a live dispatcher would."""
    job = make_job(owner, interval_seconds=60, overlap_policy="allow", **fields)
    born = db_now() - age
    rewrite_job(job, created_at=born, next_fire_at=born + MIN)
    t = born + MIN
    while t <= db_now():
        Dispatcher().tick(now=t)
        t += MIN
    job.refresh_from_db()
    return job


def runs_of(job: Job) -> list[Run]:
    return list(Run.objects.filter(job=job).order_by("scheduled_at"))


def succeed(runs) -> None:
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(state="succeeded", attempt=1)


def delivered(*jobs: Job) -> None:
    """Every waiting run of ``jobs`` delivered, as a live worker would have
    delivered it: a claimable run left waiting with no worker running is
    the ``no worker`` rule's."""
    succeed(Run.objects.filter(job__in=jobs, state__in=["pending", "retrying"]))


def log_line(webhook_id, run: Run, t: float | None = None) -> dict:
    return {
        "event": "start",
        "t": t if t is not None else run.scheduled_at.timestamp() + 1,
        "path": "/ok",
        "webhook_id": str(webhook_id),
        "job_id": str(run.job_id),
        "run_id": str(webhook_id),
        "attempt": 1,
        "scheduled_at": iso(run.scheduled_at),
    }


def write_log(path, lines) -> str:
    """A loopback receiver log: ``start`` lines (and an ``end`` each)."""
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
            f.write(json.dumps({"event": "end", "webhook_id": line["webhook_id"], "status": 200}))
            f.write("\n")
        f.write('{"event": "start", "webhook_id": "half a line')  # being written right now
    return str(path)


def audit_fires(*args: str) -> str:
    """Run the command; return its report, or raise CommandError with the report attached."""
    out = io.StringIO()
    try:
        call_command("audit_fires", *args, stdout=out)
    except CommandError as exc:
        exc.report = out.getvalue()  # type: ignore[attr-defined]
        raise
    return out.getvalue()


def fails_naming(rule: str, *args: str) -> str:
    with pytest.raises(CommandError) as failed:
        audit_fires(*args)
    assert failed.value.returncode == 1
    report = failed.value.report  # type: ignore[attr-defined]
    assert f"  {rule} " in report, report
    assert "FAIL:" in report and f"{rule} " in report.splitlines()[-1]
    return report


# -- clean -------------------------------------------------------------------


def test_a_clean_history_passes_and_the_command_exits_zero(owner, tmp_path):
    beat("dispatcher")
    beat("worker")
    job = minute_job(owner)
    runs = runs_of(job)
    assert len(runs) == 10
    succeed(runs[:8])  # the rest are still pending, and not yet claimable
    Run.objects.filter(pk__in=[r.pk for r in runs[8:]]).update(available_at=db_now() + MIN)
    # A retry of one fire is a second delivery under the same webhook-id: fine.
    lines = [log_line(r.pk, r) for r in runs[:8]] + [log_line(runs[0].pk, runs[0])]
    log = write_log(tmp_path / "r.jsonl", lines)
    job_verbs.trigger(job)  # a manual run is the owner's own, not a slot
    Run.objects.filter(kind="manual").update(state="succeeded", attempt=1)
    manual = Run.objects.get(kind="manual")
    log = write_log(tmp_path / "r.jsonl", [*lines, log_line(manual.pk, manual)])

    report = audit(receiver_log=log)
    assert report.ok, report.render()
    assert (report.counts["slots"], report.counts["slots_run"]) == (10, 10)
    assert report.counts["deliveries"] == 10 and report.counts["delivered_ids"] == 9

    text = audit_fires("--receiver-log", log, "--job", str(job.pk))
    assert "OK: every fire accounted for exactly once" in text
    assert "10 expected: 10 with a run, 0 counted as missed" in text


# -- each rule ---------------------------------------------------------------


def test_a_gap_is_reported_with_its_slot_and_fails_the_command(owner):
    job = minute_job(owner)
    delivered(job)
    gone = runs_of(job)[2]
    gone.delete()

    [gap] = audit().violations
    assert (gap.rule, gap.scheduled_at, gap.job_id) == (Rule.GAP, gone.scheduled_at, str(job.pk))
    report = fails_naming("gap")
    assert iso(gone.scheduled_at) in report and "FAIL: 1 violations (gap 1)" in report


def test_a_run_off_its_schedule_is_reported_and_masks_no_gap(owner):
    """An off-slot run in the same span as a missing fire: the count would
    balance, but the run is not on a slot, so both are reported."""
    job = minute_job(owner)
    delivered(job)
    runs = runs_of(job)
    runs[3].delete()
    stray = Run.objects.create(job=job, scheduled_at=runs[3].scheduled_at + 30 * S)
    Run.objects.create(job=job, scheduled_at=runs[3].scheduled_at + 35 * S, kind="manual")

    report = audit()
    assert sorted(report.rules()) == [Rule.GAP, Rule.OFF_SCHEDULE], report.render()
    [off] = report.of_rule(Rule.OFF_SCHEDULE)
    assert off.run_id == str(stray.pk)
    fails_naming("off schedule")


def test_two_runs_for_one_fire_are_found_once_the_unique_key_is_gone(owner):
    """The counts trust the unique index run_one_per_fire only while it is
    there: dropped (rolled back with this test), duplicates are searched for."""
    job = minute_job(owner)
    first = runs_of(job)[1]
    with connection.cursor() as cur:
        cur.execute("ALTER TABLE runs_run DROP CONSTRAINT run_one_per_fire")
    Run.objects.create(job=job, scheduled_at=first.scheduled_at, state="skipped", reason="x")
    report = audit()
    assert report.rules()[Rule.DUPLICATE_RUN] == 1, report.render()
    [dup] = report.of_rule(Rule.DUPLICATE_RUN)
    assert dup.scheduled_at == first.scheduled_at
    fails_naming("duplicate run")


def test_more_counted_than_missing_is_a_count_mismatch(owner):
    job = minute_job(owner)
    delivered(job)
    ScheduleSpan.objects.filter(job=job).update(missed_count=2)
    [mismatch] = audit().violations
    assert mismatch.rule == Rule.COUNT_MISMATCH and "counts 2 missed fires" in mismatch.message
    fails_naming("count mismatch")


def test_running_runs_past_their_deadline_or_with_their_worker_gone_are_stuck(owner):
    job = minute_job(owner)
    dead, wedged, slow, held, *rest = runs_of(job)
    succeed(rest)
    live = beat("worker")
    now = db_now()

    def running(run, owner_name, lease, deadline):
        Run.objects.filter(pk=run.pk).update(
            state="running",
            attempt=1,
            lease_owner=owner_name,
            lease_until=now + lease,
            deadline_at=now + deadline,
        )

    running(dead, "worker-dead", -5 * MIN, 5 * MIN)  # its worker is gone
    running(wedged, live, 5 * MIN, -5 * MIN)  # heartbeating past its deadline
    running(slow, "worker-dead", -1 * S, 5 * MIN)  # within the tolerance
    running(held, live, -5 * MIN, 5 * MIN)  # its worker is alive: it may still report

    report = audit()
    assert report.rules() == {Rule.STUCK_RUNNING: 2}, report.render()
    assert {v.run_id for v in report.violations} == {str(dead.pk), str(wedged.pk)}
    text = fails_naming("stuck running", "--tolerance", "5")
    assert "worker-dead (attempt 1) expired" in text and "past its attempt deadline" in text


def test_reasons_attempts_and_deliveries_of_runs_that_never_ran(owner, tmp_path):
    job = minute_job(owner)
    runs = runs_of(job)
    succeed(runs[:3])
    Run.objects.filter(pk=runs[3].pk).update(state="missed", reason="")
    Run.objects.filter(pk=runs[4].pk).update(state="skipped", reason="overlap")
    # The rest wait, not yet claimable (a worker's backoff).
    Run.objects.filter(pk__in=[r.pk for r in runs[5:]]).update(available_at=db_now() + MIN)
    log = write_log(tmp_path / "r.jsonl", [log_line(r.pk, r) for r in (runs[0], runs[1], runs[4])])

    report = audit(receiver_log=log)
    assert sorted((v.rule, v.run_id) for v in report.violations) == sorted(
        [
            (Rule.NO_REASON, str(runs[3].pk)),
            (Rule.NOT_RUN_BUT_ATTEMPTED, str(runs[4].pk)),
            (Rule.NEVER_DELIVERED, str(runs[2].pk)),
        ]
    )


def test_a_fire_under_two_webhook_ids_exits_one_on_the_real_command_line(owner, tmp_path, capsys):
    job = minute_job(owner)
    runs = runs_of(job)
    succeed(runs)
    impostor = uuid.uuid4()
    lines = [log_line(r.pk, r) for r in runs] + [log_line(impostor, runs[3])]
    log = write_log(tmp_path / "r.jsonl", lines)

    report = audit(receiver_log=log)
    assert sorted(report.rules()) == [Rule.TWO_IDS_FOR_ONE_FIRE, Rule.UNKNOWN_ID]
    [dup] = report.of_rule(Rule.TWO_IDS_FOR_ONE_FIRE)
    assert dup.scheduled_at == runs[3].scheduled_at and str(impostor) in dup.message

    with pytest.raises(SystemExit) as exited:
        execute_from_command_line(["manage.py", "audit_fires", "--receiver-log", log])
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert "two ids for one fire" in out and str(impostor) in out
    assert "audit failed: 2 violations" in err


def test_a_dead_fleet_is_reported_with_what_waits_and_since_when(owner):
    """The fleet was alive, dispatching and delivering; then every process
    stopped beating. The audit names each rule once, for the whole fleet,
    with how much is owed and since when."""
    beat("dispatcher", "d1")
    beat("worker", "w1")
    jobs = [minute_job(owner) for _ in range(3)]
    minute_job(owner, target_kind="pull", url="")  # its runs wait for the owner's workers
    webhook = Run.objects.filter(job__in=jobs, state="pending")
    waiting = webhook.count()
    oldest_run = min(webhook.values_list("available_at", flat=True))
    oldest_fire = min(j.next_fire_at for j in Job.objects.filter(pk__in=[j.pk for j in jobs]))
    seen = ProcessHeartbeat.objects.get(name="d1").last_seen
    shift(150)  # every next fire is now past its 60 s grace and the 10 s tolerance
    beat("worker", "w2", stopping=True)  # a worker draining on its way out claims nothing

    report = audit()
    assert report.rules() == {Rule.NO_DISPATCHER: 1, Rule.NO_WORKER: 1}, report.render()
    [dispatch] = report.of_rule(Rule.NO_DISPATCHER)
    assert f"last seen {iso(seen)}" in dispatch.message
    assert "4 active jobs overdue" in dispatch.message  # the pull job's fires are owed too
    assert f"the oldest fire due since {iso(oldest_fire)}" in dispatch.message
    [work] = report.of_rule(Rule.NO_WORKER)
    assert f"{waiting} claimable webhook runs waiting" in work.message
    assert f"the oldest claimable since {iso(oldest_run)}" in work.message
    text = fails_naming("no dispatcher")
    assert "FAIL: 2 violations (no dispatcher 1, no worker 1)" in text
    assert "0 dispatchers and 0 workers alive" in text


def test_a_fleet_that_is_starting_is_not_dead(owner):
    """A process up for less than the tolerance is catching up: it is not
    alive for ``undispatched`` and ``stuck waiting`` yet, but it runs, so
    the fleet is not dead either; nor is anything owed within the grace."""
    job = minute_job(owner)
    assert audit().rules() == {Rule.NO_WORKER: 1}  # its runs wait; the next fire is not late
    shift(150)
    beat("dispatcher", up=dt.timedelta(seconds=1))
    beat("worker", up=dt.timedelta(seconds=1))
    report = audit()
    assert report.ok, report.render()
    assert report.counts["dispatchers_alive"] == report.counts["workers_alive"] == 0
    job_verbs.pause(job)  # nothing owed: none is late, whoever runs
    ProcessHeartbeat.objects.all().delete()
    assert audit().ok


# -- the mutation check --------------------------------------------------------


def stalled_dispatcher(owner, tmp_path):
    """The dispatcher beats its fleet row but never advances the job: the old
    auditor audited only up to next_fire_at, and called this clean."""
    beat("dispatcher")
    job = make_job(owner, interval_seconds=60)
    born = db_now() - 10 * MIN
    rewrite_job(job, created_at=born, next_fire_at=born + MIN)
    return ()


def fire_dropped_before_a_pause(owner, tmp_path):
    """A pause that did not plan the fire due just before it: the old
    auditor's pause span began at the last run before the pause."""
    job = minute_job(owner, age=10 * MIN + 30 * S)
    shift(45)  # a fire falls due, and no dispatcher reaches it before the pause
    job_verbs.pause(job)
    pause = ScheduleSpan.objects.get(job=job, state="paused").started_at
    last = Run.objects.filter(job=job, scheduled_at__lte=pause).order_by("-scheduled_at")[0]
    assert last.reason == "paused"  # planned by the pause itself
    with connection.cursor() as cur:
        cur.execute("DELETE FROM runs_run WHERE id = %s", [last.pk])
    return ()


def gap_before_a_schedule_edit(owner, tmp_path):
    """A fire lost before the schedule was edited: the old auditor only
    looked after the last edit."""
    job = minute_job(owner)
    lost = runs_of(job)[4]
    job_verbs.edit(job, {"interval_seconds": 120})
    with connection.cursor() as cur:
        cur.execute("DELETE FROM runs_run WHERE id = %s", [lost.pk])
    return ()


def starved_pending_run(owner, tmp_path):
    """A pending run nobody claims while a worker is alive."""
    job = minute_job(owner)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runs_run SET state = 'succeeded', attempt = 1 WHERE job_id = %s"
            " AND scheduled_at < (SELECT max(scheduled_at) FROM runs_run WHERE job_id = %s)",
            [job.pk, job.pk],
        )
        cur.execute(
            "UPDATE runs_run SET available_at = scheduled_at WHERE job_id = %s"
            " AND state = 'pending'",
            [job.pk],
        )
    shift(120)
    beat("worker")
    return ()


def delivery_after_a_delete(owner, tmp_path):
    """A delivery that started after the delete committed (the receiver's
    arrival time against the deleted span's start, both on this host)."""
    job = minute_job(owner)
    runs = runs_of(job)
    succeed(runs)
    job_verbs.soft_delete(job)
    deleted = ScheduleSpan.objects.get(job=job, state="deleted").started_at
    lines = [log_line(r.pk, r) for r in runs[:-1]]
    lines.append(log_line(runs[-1].pk, runs[-1], t=(deleted + 30 * S).timestamp()))
    return ("--receiver-log", write_log(tmp_path / "r.jsonl", lines))


def dead_dispatcher(owner, tmp_path):
    """The only dispatcher dies (its heartbeat stops) while its jobs' fires
    fall due: the old auditor judged ``undispatched`` only while a
    dispatcher was alive, and called the dead fleet OK."""
    beat("dispatcher")
    delivered(minute_job(owner))
    shift(150)  # the next fire is past its 60 s grace and the 10 s tolerance
    return ()


def dead_worker(owner, tmp_path):
    """The only worker dies while runs wait to be claimed: the old auditor
    judged ``stuck waiting`` only while a worker was alive."""
    beat("worker")
    minute_job(owner)  # its runs are claimable, and wait
    shift(30)  # the worker's last beat is older than a live one's
    return ()


def second_id_for_one_fire(owner, tmp_path):
    job = minute_job(owner)
    runs = runs_of(job)
    succeed(runs)
    lines = [log_line(r.pk, r) for r in runs]
    lines.append({**log_line(runs[5].pk, runs[5]), "webhook_id": str(runs[6].pk)})
    lines[-1]["run_id"] = str(runs[6].pk)
    return ("--receiver-log", write_log(tmp_path / "r.jsonl", lines))


def undelivered_success(owner, tmp_path):
    job = minute_job(owner)
    runs = runs_of(job)
    succeed(runs)
    lines = [log_line(r.pk, r) for r in runs if r != runs[7]]
    return ("--receiver-log", write_log(tmp_path / "r.jsonl", lines))


def delivery_after_a_pause(owner, tmp_path):
    job = minute_job(owner)
    runs = runs_of(job)
    succeed(runs)
    job_verbs.pause(job)
    paused = ScheduleSpan.objects.get(job=job, state="paused").started_at
    lines = [log_line(r.pk, r) for r in runs[:-1]]
    lines.append(log_line(runs[-1].pk, runs[-1], t=(paused + 20 * S).timestamp()))
    return ("--receiver-log", write_log(tmp_path / "r.jsonl", lines))


@pytest.mark.parametrize(
    "mutation, rule",
    [
        (stalled_dispatcher, "undispatched"),
        (stalled_dispatcher, "gap"),
        (fire_dropped_before_a_pause, "gap"),
        (gap_before_a_schedule_edit, "gap"),
        (starved_pending_run, "stuck waiting"),
        (dead_dispatcher, "no dispatcher"),
        (dead_worker, "no worker"),
        (delivery_after_a_delete, "delivered after delete"),
        (delivery_after_a_pause, "delivered after pause"),
        (second_id_for_one_fire, "two ids for one fire"),
        (undelivered_success, "never delivered"),
    ],
)
def test_mutation_each_failure_class_fails_the_audit_naming_its_rule(
    owner, tmp_path, mutation, rule
):
    args = mutation(owner, tmp_path)
    fails_naming(rule, *args)


def test_mutations_are_the_only_difference(owner, tmp_path):
    """The histories the mutations start from audit clean (so each failure
    above is the mutation's, not the setup's)."""
    beat("dispatcher")
    beat("worker")
    job = minute_job(owner, age=10 * MIN + 30 * S)
    shift(45)
    job_verbs.pause(job)
    other = minute_job(owner)
    job_verbs.edit(other, {"interval_seconds": 120})
    runs = runs_of(other)
    succeed(runs)
    job_verbs.soft_delete(other)
    deleted = ScheduleSpan.objects.get(job=other, state="deleted").started_at
    lines = [log_line(r.pk, r) for r in runs]
    # Arrived within the tolerance of the delete: a request already in flight.
    lines[-1]["t"] = receiver_clock(deleted + 2 * S)
    log = write_log(tmp_path / "r.jsonl", lines)
    for report in (audit(job_ids=[other.pk], receiver_log=log), audit(job_ids=[job.pk])):
        assert report.ok, report.render()


# -- no false alarms -------------------------------------------------------


def test_a_1s_job_through_a_200s_outage_records_100_and_counts_the_rest(owner):
    beat("dispatcher")
    # A 1 s grace: the tick lists 104 fires, of which 100 are misfires.
    job = make_job(owner, interval_seconds=1, misfire_policy="skip", misfire_grace_seconds=1)
    born = db_now() - 205 * S
    rewrite_job(job, created_at=born, next_fire_at=born + S)
    Dispatcher().tick(now=born + S)
    Dispatcher().tick()  # the outage ends: one tick decides ~200 fires
    job.refresh_from_db()
    missed = Run.objects.filter(job=job, state="missed").count()
    assert missed == 100 and job.missed_count > 30
    delivered(job)

    report = audit()
    assert report.ok, report.render()
    assert report.counts["slots_counted"] == job.missed_count
    assert "OK:" in audit_fires()


def test_a_per_minute_cron_through_a_24h_outage_audits_clean(owner):
    beat("dispatcher")
    job = make_job(owner, cron="* * * * *", misfire_policy="skip")
    born = (db_now() - dt.timedelta(hours=24, minutes=5)).replace(second=30, microsecond=0)
    rewrite_job(job, created_at=born, next_fire_at=born + 30 * S)
    Dispatcher().tick(now=born + 30 * S)
    Dispatcher().tick()
    job.refresh_from_db()
    assert Run.objects.filter(job=job, state="missed").count() == 100
    assert job.missed_count > 1300
    delivered(job)

    report = audit()
    assert report.ok, report.render()
    assert report.counts["slots"] > 1440


def test_pause_edit_resume_and_delete_through_the_verbs_audit_clean(owner):
    """Every stretch of a job's life, each verb at its own database time,
    with a dispatcher alive throughout: nothing owed is left out."""
    beat("dispatcher")
    a = make_job(
        owner, interval_seconds=60, misfire_policy="catch_up", max_catchup=2, overlap_policy="allow"
    )
    b = make_job(owner, cron="*/2 * * * *", overlap_policy="allow")
    dispatcher = Dispatcher()
    for offset, action in [
        (150, dispatcher.tick),
        (200, lambda: job_verbs.pause(a, note="maintenance")),
        (260, lambda: job_verbs.edit(b, {"cron": "* * * * *"})),
        (600, lambda: job_verbs.resume(a, catch_up=True)),
        (630, dispatcher.tick),
        (700, lambda: job_verbs.edit(a, {"interval_seconds": 30, "misfire_grace_seconds": 5})),
        (900, lambda: job_verbs.pause(b)),
        (960, dispatcher.tick),
        (1000, lambda: job_verbs.resume(b)),
        (1200, lambda: job_verbs.soft_delete(b)),
        (1300, dispatcher.tick),
    ]:
        shift(offset)
        action()
        beat("dispatcher", "d")
    paused = ScheduleSpan.objects.filter(job=a, state="paused").get()
    made_by_resume = Run.objects.filter(
        job=a, kind="catch_up", scheduled_at__gt=paused.started_at, scheduled_at__lt=paused.ended_at
    )
    assert made_by_resume.count() == 2
    assert Run.objects.filter(job=a, state="skipped", reason="paused").exists()
    assert ScheduleSpan.objects.filter(job__in=[a, b]).count() == 4 + 5
    delivered(a, b)

    report = audit()
    assert report.ok, report.render()
    assert report.counts["slots"] > 20
    assert "OK:" in audit_fires()


# -- arguments ---------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (("--since", "yesterday"), "--since must be an ISO 8601 time"),
        (("--until", "2026-13-45"), "--until must be an ISO 8601 time"),
        (("--since", "2026-06-01T12:00Z", "--until", "2026-06-01T11:00Z"), "--until must be"),
        (("--job", "42"), "--job must be a job id"),
        (("--job", str(uuid.uuid4())), "--job: no such job"),
        (("--receiver-log", "/nonexistent.jsonl"), "is not a readable file"),
        (("--tolerance", "-1"), "--tolerance must be between"),
        (("--since", "2999-01-01T00:00:00Z"), "until must be after since"),
    ],
)
def test_bad_arguments_are_a_clear_usage_error(args, message):
    with pytest.raises(CommandError, match=message) as failed:
        audit_fires(*args)
    assert failed.value.returncode == 2


def test_naive_times_are_read_as_utc(owner):
    delivered(minute_job(owner))
    text = audit_fires("--since", "2026-06-01T11:00:00", "--until", "2026-06-01 13:00")
    assert "2026-06-01T11:00:00Z .. 2026-06-01T13:00:00Z" in text
