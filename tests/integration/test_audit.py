"""The fire auditor (runs/audit.py) and ``manage.py audit_fires``, handed real
violations: a gap, a duplicate fire, an off-schedule run, a stuck lease. Each
one must make the command exit non-zero and be named in its report."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid

import pytest
import time_machine
from django.core.management import call_command, execute_from_command_line
from django.core.management.base import CommandError

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from jobs.models import Job
from runs import job_verbs
from runs.audit import Kind, audit
from runs.models import Run
from tests.factories import at, make_job, rewrite_job

pytestmark = pytest.mark.django_db

T0 = at("2026-06-01T12:00:00")
MIN = dt.timedelta(minutes=1)
SINCE, UNTIL = T0 - dt.timedelta(hours=1), T0 + dt.timedelta(hours=1)


def iso(value: dt.datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def every_minute_job(owner, fires: int = 6, **fields) -> Job:
    """A 60 s interval job anchored at T0, dispatched for ``fires`` fires."""
    job = make_job(owner, interval_seconds=60, overlap_policy="allow", **fields)
    rewrite_job(job, created_at=T0 - MIN, start_at=T0, next_fire_at=T0)
    job.refresh_from_db()
    for k in range(fires):
        Dispatcher().tick(now=T0 + k * MIN)
    return job


def runs_of(job: Job) -> list[Run]:
    return list(Run.objects.filter(job=job).order_by("scheduled_at"))


def succeed(runs) -> None:
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(state="succeeded", attempt=1)


def write_log(path, deliveries) -> str:
    """A loopback receiver log: one ``start`` line (and an ``end``) per delivery."""
    with open(path, "w") as f:
        for k, (webhook_id, run) in enumerate(deliveries):
            f.write(
                json.dumps(
                    {
                        "event": "start",
                        "t": 1_780_000_000 + k,
                        "path": "/ok",
                        "webhook_id": str(webhook_id),
                        "job_id": str(run.job_id),
                        "run_id": str(webhook_id),
                        "attempt": 1,
                        "scheduled_at": iso(run.scheduled_at),
                    }
                )
                + "\n"
            )
            f.write(json.dumps({"event": "end", "webhook_id": str(webhook_id), "status": 200}))
            f.write("\n")
        f.write('{"event": "start", "webhook_id": "half a line')  # being written right now
    return str(path)


def audit_fires(*args: str) -> str:
    """Run the command; return its report, or raise CommandError with the report attached."""
    out = io.StringIO()
    try:
        call_command("audit_fires", *args, stdout=out)
    except CommandError as exc:
        exc.report = out.getvalue()
        raise
    return out.getvalue()


WINDOW = ("--since", iso(SINCE), "--until", iso(UNTIL))


# -- clean -------------------------------------------------------------------


def test_a_clean_history_passes_and_the_command_exits_zero(owner, tmp_path):
    job = every_minute_job(owner)
    runs = runs_of(job)
    succeed(runs[:4])  # the last two are still pending: a live state accounts for a fire
    # A retry of one fire is a second delivery under the same webhook-id: fine.
    log = write_log(tmp_path / "r.jsonl", [(r.pk, r) for r in runs[:4]] + [(runs[0].pk, runs[0])])
    job_verbs.trigger(job)  # manual runs are the owner's own, not a slot

    report = audit(SINCE, UNTIL, receiver_log=log)
    assert report.ok, report.render()
    assert (report.counts["slots"], report.counts["slots_accounted"]) == (6, 6)
    assert report.counts["deliveries"] == 5 and report.counts["delivered_ids"] == 4

    text = audit_fires(*WINDOW, "--receiver-log", log, "--job", str(job.pk))
    assert "OK: every fire accounted for exactly once" in text
    assert "6 expected, 6 accounted for" in text


def test_missed_skipped_and_catch_up_runs_account_for_their_slots(owner):
    job = every_minute_job(owner, fires=0, misfire_policy="catch_up", max_catchup=2)
    Dispatcher().tick(now=T0 + 9 * MIN + dt.timedelta(seconds=30))  # a long outage
    kinds = [(r.kind, r.state) for r in runs_of(job)]
    assert kinds.count(("catch_up", "pending")) == 2 and kinds.count(("scheduled", "missed")) == 7
    report = audit(SINCE, UNTIL)
    assert report.ok, report.render()
    assert report.counts["slots"] == 10


def test_a_paused_stretch_has_no_slots(owner):
    job = every_minute_job(owner, fires=3)  # T0, T0+1, T0+2
    with time_machine.travel(T0 + 2 * MIN + dt.timedelta(seconds=30), tick=False):
        job_verbs.pause(job, note="maintenance")
    with time_machine.travel(T0 + 7 * MIN + dt.timedelta(seconds=30), tick=False):
        job_verbs.resume(job)
    Job.objects.filter(pk=job.pk).update(next_fire_at=T0 + 8 * MIN)
    Dispatcher().tick(now=T0 + 8 * MIN)
    Dispatcher().tick(now=T0 + 9 * MIN)
    report = audit(SINCE, UNTIL, tolerance=dt.timedelta(0))
    assert report.ok, report.render()
    assert report.counts["slots"] == 5 and report.counts["slots_paused"] == 5


# -- violations ----------------------------------------------------------------


def test_a_gap_is_reported_and_fails_the_command(owner):
    job = every_minute_job(owner)
    gone = runs_of(job)[2]
    gone.delete()

    report = audit(SINCE, UNTIL)
    [gap] = report.violations
    assert (gap.kind, gap.scheduled_at, gap.job_id) == (Kind.GAP, T0 + 2 * MIN, str(job.pk))

    with pytest.raises(CommandError) as failed:
        audit_fires(*WINDOW)
    assert failed.value.returncode == 1
    assert "gap" in failed.value.report and iso(T0 + 2 * MIN) in failed.value.report
    assert "FAIL: 1 violations (gap 1)" in failed.value.report


def test_a_fire_delivered_under_two_webhook_ids_is_a_duplicate(owner, tmp_path, capsys):
    """A second dispatcher that minted its own run for a fire would show up at the
    receiver as one fire under two webhook-ids."""
    job = every_minute_job(owner)
    runs = runs_of(job)
    succeed(runs)
    impostor = uuid.uuid4()
    log = write_log(tmp_path / "r.jsonl", [(r.pk, r) for r in runs] + [(impostor, runs[3])])

    report = audit(SINCE, UNTIL, receiver_log=log)
    assert sorted(report.kinds()) == [Kind.DUPLICATE_FIRE, Kind.UNKNOWN_WEBHOOK_ID]
    [dup] = report.of_kind(Kind.DUPLICATE_FIRE)
    assert dup.scheduled_at == runs[3].scheduled_at and str(impostor) in dup.message

    # The real command line: the process exits 1 and says why on stderr.
    argv = ["manage.py", "audit_fires", *WINDOW, "--receiver-log", log]
    with pytest.raises(SystemExit) as exited:
        execute_from_command_line(argv)
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert "duplicate_fire" in out and str(impostor) in out
    assert "audit failed: 2 violations" in err


def test_a_run_at_an_off_slot_time_is_reported_as_off_schedule(owner):
    job = every_minute_job(owner)
    stray = Run.objects.create(job=job, scheduled_at=T0 + dt.timedelta(seconds=90), state="pending")
    Run.objects.create(job=job, scheduled_at=T0 + dt.timedelta(seconds=95), kind="manual")

    [off] = audit(SINCE, UNTIL).violations
    assert (off.kind, off.run_id) == (Kind.OFF_SCHEDULE, str(stray.pk))
    with pytest.raises(CommandError) as failed:
        audit_fires(*WINDOW)
    assert failed.value.returncode == 1 and "off_schedule" in failed.value.report


def test_a_stuck_lease_is_reported_and_fails_the_command(owner):
    job = every_minute_job(owner)
    stuck, wedged, fine = runs_of(job)[:3]
    now = db_now()
    Run.objects.filter(pk=stuck.pk).update(
        state="running",
        attempt=1,
        lease_owner="worker-dead",
        lease_until=now - dt.timedelta(minutes=5),
        deadline_at=now + dt.timedelta(minutes=5),
    )
    # Heartbeating, but far past its attempt deadline (a lease beyond the
    # deadline should never happen: the heartbeat caps it).
    Run.objects.filter(pk=wedged.pk).update(
        state="running",
        attempt=1,
        lease_owner="worker-wedged",
        lease_until=now + dt.timedelta(minutes=5),
        deadline_at=now - dt.timedelta(minutes=5),
    )
    # Expired one second ago: within the tolerance, someone may be taking it over.
    Run.objects.filter(pk=fine.pk).update(
        state="running",
        attempt=1,
        lease_owner="worker-slow",
        lease_until=now - dt.timedelta(seconds=1),
        deadline_at=now + dt.timedelta(minutes=5),
    )

    report = audit(SINCE, UNTIL)
    assert [v.kind for v in report.violations] == [Kind.STUCK, Kind.STUCK]
    assert {v.run_id for v in report.violations} == {str(stuck.pk), str(wedged.pk)}
    with pytest.raises(CommandError) as failed:
        audit_fires(*WINDOW, "--tolerance", "5")
    assert failed.value.returncode == 1
    assert "worker-dead (attempt 1) expired" in failed.value.report
    assert "past its attempt deadline" in failed.value.report


def test_reasons_missing_and_successes_never_delivered_are_reported(owner, tmp_path):
    job = every_minute_job(owner)
    runs = runs_of(job)
    succeed(runs[:3])
    Run.objects.filter(pk=runs[3].pk).update(state="missed", reason="")
    Run.objects.filter(pk=runs[4].pk).update(state="skipped", reason="overlap")
    log = write_log(tmp_path / "r.jsonl", [(r.pk, r) for r in runs[:2]] + [(runs[4].pk, runs[4])])

    report = audit(SINCE, UNTIL, receiver_log=log)
    assert sorted((v.kind, v.run_id) for v in report.violations) == sorted(
        [
            (Kind.NO_REASON, str(runs[3].pk)),
            (Kind.NOT_RUN_BUT_ATTEMPTED, str(runs[4].pk)),
            (Kind.UNDELIVERED, str(runs[2].pk)),
        ]
    )


# -- arguments ---------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (("--since", "yesterday"), "--since must be an ISO 8601 time"),
        (("--since", iso(T0), "--until", "2026-13-45"), "--until must be an ISO 8601 time"),
        (("--since", iso(T0), "--until", iso(T0 - MIN)), "--until must be after --since"),
        (("--since", iso(T0), "--job", "42"), "--job must be a job id"),
        (("--since", iso(T0), "--job", str(uuid.uuid4())), "--job: no such job"),
        (("--since", iso(T0), "--receiver-log", "/nonexistent.jsonl"), "is not a readable file"),
        (("--since", iso(T0), "--tolerance", "-1"), "--tolerance must be between"),
        (("--since", "2999-01-01T00:00:00Z"), "until must be after since"),
    ],
)
def test_bad_arguments_are_a_clear_usage_error(args, message):
    with pytest.raises(CommandError, match=message) as failed:
        audit_fires(*args)
    assert failed.value.returncode == 2


def test_naive_times_are_read_as_utc(owner):
    every_minute_job(owner)
    text = audit_fires("--since", "2026-06-01T11:00:00", "--until", "2026-06-01 13:00")
    assert "2026-06-01T11:00:00Z .. 2026-06-01T13:00:00Z" in text
