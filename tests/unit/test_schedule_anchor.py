"""The anchor rule (jobs/schedules.py ``Schedule.for_job``): an interval
schedule counts its steps from start_at when set, else from the job's
creation time; a job not saved yet has no creation time.

One table, read four ways: by ``Schedule.for_job`` itself, and by the three
``schedule`` properties that build a job's schedule from what they hold (the
job's row, a span of its schedule history, the dispatcher's due job). No
database: the models are built in memory, never saved.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from jobs.models import Job, ScheduleSpan
from jobs.schedules import Schedule, ScheduleError
from runs.planning import DueJob


def utc(iso: str) -> datetime:
    return datetime.fromisoformat(iso).astimezone(UTC)


def iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Case:
    cron: str | None
    interval_seconds: int | None
    start_at: str | None
    created_at: str | None  # None: a job not saved yet
    after: str
    fires: list[str] | None  # None: no schedule can be built (ScheduleError)

    def fields(self) -> dict:
        return {
            "cron": self.cron,
            "interval_seconds": self.interval_seconds,
            "timezone": "Europe/Berlin",
            "start_at": self.start_at and utc(self.start_at),
            "created_at": self.created_at and utc(self.created_at),
        }


CASES = {
    # start_at set: the steps count from it, not from the creation time.
    "start_at set, in the future": Case(
        cron=None,
        interval_seconds=600,
        start_at="2026-01-01T00:05:00Z",
        created_at="2025-12-31T23:59:07Z",
        after="2026-01-01T00:00:00Z",
        fires=["2026-01-01T00:05:00Z", "2026-01-01T00:15:00Z"],
    ),
    "start_at set, before the creation": Case(
        cron=None,
        interval_seconds=600,
        start_at="2026-01-01T00:00:00Z",
        created_at="2026-01-01T00:07:00Z",
        after="2026-01-01T00:07:00Z",
        fires=["2026-01-01T00:10:00Z", "2026-01-01T00:20:00Z"],
    ),
    # start_at unset: from the creation time, so the first fire is one
    # interval after it, on the creation's own seconds.
    "start_at unset": Case(
        cron=None,
        interval_seconds=600,
        start_at=None,
        created_at="2026-01-01T00:00:07.250000Z",
        after="2026-01-01T00:00:07.250000Z",
        fires=["2026-01-01T00:10:07.250000Z", "2026-01-01T00:20:07.250000Z"],
    ),
    # A job not saved yet has no creation time: start_at anchors it...
    "unsaved, start_at set": Case(
        cron=None,
        interval_seconds=600,
        start_at="2026-01-01T00:05:00Z",
        created_at=None,
        after="2026-01-01T00:00:00Z",
        fires=["2026-01-01T00:05:00Z", "2026-01-01T00:15:00Z"],
    ),
    # ... and without start_at an interval has nothing to count from.
    "unsaved, start_at unset": Case(
        cron=None,
        interval_seconds=600,
        start_at=None,
        created_at=None,
        after="2026-01-01T00:00:00Z",
        fires=None,
    ),
    # A cron has no anchor: the creation time changes nothing, and start_at
    # only holds fires back.
    "cron, unsaved": Case(
        cron="0 * * * *",
        interval_seconds=None,
        start_at=None,
        created_at=None,
        after="2026-01-01T00:30:00Z",
        fires=["2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"],
    ),
    "cron, start_at set": Case(
        cron="0 * * * *",
        interval_seconds=None,
        start_at="2026-01-01T01:30:00Z",
        created_at="2026-01-01T00:00:07Z",
        after="2026-01-01T00:30:00Z",
        fires=["2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_for_job_states_the_anchor_rule(case: Case) -> None:
    if case.fires is None:
        with pytest.raises(ScheduleError, match="needs start_at or an anchor"):
            Schedule.for_job(**case.fields())
        return
    schedule = Schedule.for_job(**case.fields())
    assert [iso(f) for f in schedule.next_fires(utc(case.after), 2)] == case.fires


def _job(case: Case) -> Job:
    fields = case.fields()
    return Job(name="anchored", **fields)


def _span(case: Case) -> ScheduleSpan:
    fields = case.fields()
    return ScheduleSpan(state="active", anchor=fields.pop("created_at"), **fields)


def _due(case: Case) -> DueJob:
    return DueJob(
        id=uuid.uuid4(),
        next_fire_at=utc(case.after),
        misfire_policy="skip",
        max_catchup=3,
        misfire_grace_seconds=60,
        overlap_policy="skip",
        **case.fields(),
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_jobs_row_reads_its_schedule_by_the_rule(case: Case) -> None:
    if case.fires is None:
        with pytest.raises(ScheduleError):
            _ = _job(case).schedule
        return
    assert _job(case).schedule == Schedule.for_job(**case.fields())


# A span and a due job come from a saved job: they always have its creation time.
SAVED = {name: case for name, case in CASES.items() if case.created_at is not None}


@pytest.mark.parametrize("make", [_span, _due], ids=["schedule span", "due job"])
@pytest.mark.parametrize("case", SAVED.values(), ids=SAVED.keys())
def test_spans_and_due_jobs_read_their_schedule_by_the_rule(case: Case, make) -> None:
    schedule = make(case).schedule
    assert schedule == Schedule.for_job(**case.fields())
    assert [iso(f) for f in schedule.next_fires(utc(case.after), 2)] == case.fires
