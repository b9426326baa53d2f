"""Cron jobs across daylight-saving changeovers (docs/concepts/schedules.md "Daylight saving
(cronie's rules)").

The database clock cannot be moved for one test (the server is shared, and
production code always reads it), so the dispatcher is driven here with an
injected time: ``Dispatcher.tick(now=...)`` minute by minute through six
hours around each 2026 changeover in Europe/Berlin and America/New_York. The
runs it makes are then delivered by a real ``manage.py work`` process to the
real receiver, and the auditor checks the whole stretch.

Expected fires follow cronie's rules, written out by hand (UTC):

- a fixed-time job (neither minute nor hour starts with ``*``) whose local time
  does not exist (spring forward) fires once, at the first instant after the
  gap: "30 2 * * *" fires at 03:00 local; one whose local time happens twice
  (fall back) fires once, at its first occurrence;
- a wall-clock job ("0 * * * *", "*/30 * * * *") fires at every real
  occurrence of a matching local time: twice in a repeated hour, and not at
  all for local times inside a gap (they do not exist).
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.models import Q

from dispatch.dispatcher import Dispatcher
from runs import job_verbs
from runs.models import Run
from tests.factories import make_job
from tests.processes.faults.conftest import assert_audit_clean, drain

pytestmark = [pytest.mark.django_db(transaction=True)]

MINUTE = dt.timedelta(minutes=1)
HALF_HOUR = dt.timedelta(minutes=30)


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def every(start: str, end: str, step: dt.timedelta) -> list:
    fires, t = [], utc(start)
    while t < utc(end):
        fires.append(t)
        t += step
    return fires


# (zone, window start, window end, {cron: expected fires in UTC})
CHANGEOVERS = [
    (
        # 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z): 02:00-03:00 does not exist.
        "America/New_York",
        "2026-03-08T04:00",
        "2026-03-08T10:00",
        {
            "30 2 * * *": [utc("2026-03-08T07:00")],  # 03:00 EDT, the end of the gap
            "30 1 * * *": [utc("2026-03-08T06:30")],
            "0 * * * *": every("2026-03-08T04:00", "2026-03-08T10:00", 2 * HALF_HOUR),
            "*/30 * * * *": every("2026-03-08T04:00", "2026-03-08T10:00", HALF_HOUR),
        },
    ),
    (
        # 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z): 02:00-03:00 does not exist.
        "Europe/Berlin",
        "2026-03-28T22:00",
        "2026-03-29T04:00",
        {
            "30 2 * * *": [utc("2026-03-29T01:00")],  # 03:00 CEST, the end of the gap
            "30 1 * * *": [utc("2026-03-29T00:30")],
            # 02:00 and 02:30 local fall on 03:00 CEST (01:00Z): one run there.
            "0 * * * *": every("2026-03-28T22:00", "2026-03-29T04:00", 2 * HALF_HOUR),
            "*/30 * * * *": every("2026-03-28T22:00", "2026-03-29T04:00", HALF_HOUR),
        },
    ),
    (
        # 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z): 02:00-03:00 happens twice.
        "Europe/Berlin",
        "2026-10-24T22:00",
        "2026-10-25T04:00",
        {
            "30 2 * * *": [utc("2026-10-25T00:30")],  # 02:30 CEST only, not 02:30 CET
            "30 1 * * *": [utc("2026-10-24T23:30")],
            # Wall-clock jobs fire in both passes of 02:00-03:00 (00:00Z and 01:00Z).
            "0 * * * *": every("2026-10-24T22:00", "2026-10-25T04:00", 2 * HALF_HOUR),
            "*/30 * * * *": every("2026-10-24T22:00", "2026-10-25T04:00", HALF_HOUR),
        },
    ),
    (
        # 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z): 01:00-02:00 happens twice.
        "America/New_York",
        "2026-11-01T03:00",
        "2026-11-01T09:00",
        {
            "30 2 * * *": [utc("2026-11-01T07:30")],
            "30 1 * * *": [utc("2026-11-01T05:30")],  # 01:30 EDT only, not 01:30 EST
            # Wall-clock jobs fire in both passes of 01:00-02:00 (05:00Z and 06:00Z).
            "0 * * * *": every("2026-11-01T03:00", "2026-11-01T09:00", 2 * HALF_HOUR),
            "*/30 * * * *": every("2026-11-01T03:00", "2026-11-01T09:00", HALF_HOUR),
        },
    ),
]


def set_clock(at: dt.datetime | None) -> None:
    """This connection's database clock (the test-only punctual.clock_offset)
    reads ``at`` now, and runs on from there; None puts it back. The jobs'
    creation, schedule history and pause then happen at the changeover's
    time, as they would have; the worker process keeps the real clock."""
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('punctual.clock_offset', '', false)")
        if at is None:
            return
        cur.execute("SELECT statement_timestamp()")
        offset = (at - cur.fetchone()[0]).total_seconds()
        cur.execute("SELECT set_config('punctual.clock_offset', %s, false)", [f"{offset} seconds"])


@pytest.fixture
def clock():
    yield set_clock
    set_clock(None)


def test_cron_jobs_fire_by_cronie_rules_across_dst_changeovers(owner, processes, receiver, clock):
    processes.manage("work", "--lease-seconds", "5")
    dispatcher = Dispatcher()
    every_job = []
    in_windows = Q(pk__in=[])  # each job's runs within its own changeover's window
    for zone, start, end, expected in CHANGEOVERS:
        begin = utc(start)
        clock(begin - dt.timedelta(seconds=1))
        jobs = {
            cron: make_job(
                owner,
                name=f"{zone} {start} {cron}",
                cron=cron,
                timezone=zone,
                overlap_policy="allow",
                url=receiver.url("ok"),
            )
            for cron in expected
        }
        # The dispatcher, told the time minute by minute through the changeover.
        t = begin
        while t < utc(end):
            dispatcher.tick(now=t)
            t += MINUTE
        for cron, job in jobs.items():
            runs = list(Run.objects.filter(job=job).order_by("scheduled_at"))
            assert [r.scheduled_at for r in runs] == expected[cron], (zone, start, cron)
            # Each fired at its own minute: not before, not late.
            late = [(r.scheduled_at, r.created_at) for r in runs if r.created_at != r.scheduled_at]
            assert not late, (zone, start, cron, late)
        drain(jobs.values(), timeout=60, message=f"the {zone} {start} runs to be delivered")
        # Paused now, by the real clock (the deliveries happened before it):
        # later ticks must not touch these jobs. The pause records the fires
        # from the changeover's end to now as missed, the rest counted.
        clock(None)
        for job in jobs.values():
            job_verbs.pause(job, note="changeover done")
        every_job += jobs.values()
        in_windows |= Q(
            job__in=list(jobs.values()), scheduled_at__gte=begin, scheduled_at__lt=utc(end)
        )

    first, last = utc(CHANGEOVERS[0][1]), utc(CHANGEOVERS[-1][2])
    runs = Run.objects.filter(in_windows)
    assert set(runs.values_list("state", flat=True)) == {"succeeded"}
    # After each changeover, up to the real now, the pauses settled the fires:
    # missed past their grace, or, for a fire still within its grace when the
    # test paused its job (a */30 job paused at 02:30:49), skipped for the pause.
    settled = Run.objects.filter(job__in=every_job).exclude(in_windows)
    assert set(settled.values_list("state", "reason")) <= {
        ("missed", "past grace"),
        ("skipped", "paused"),
    }
    assert runs.count() == sum(len(f) for *_, expected in CHANGEOVERS for f in expected.values())
    assert_audit_clean(first, until=last, receiver=receiver, jobs=every_job)
