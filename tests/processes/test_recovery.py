"""A day-long dispatcher outage, recovered by a real ``manage.py dispatch``.

1,000 per-minute cron jobs and a 1 s canary; the dispatcher stops, the
database clock jumps 24 hours (the test-only ``punctual.clock_offset``, set on
the database so every new connection sees it), and a dispatcher starts again.
Recovery must record at most 100 rows per job, count the rest exactly, and
keep the canary's new fires on time while it works through the backlog.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Count, Max, Q

from core.db import db_now
from jobs.models import Job
from ops.audit import audit
from runs.models import Run
from tests import pooler
from tests.factories import make_job
from tests.processes.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]
S = dt.timedelta(seconds=1)
OUTAGE = dt.timedelta(hours=24)
CRON_JOBS = 1000


def set_clock_offset(offset: dt.timedelta | None) -> None:
    """The database clock, moved for every new connection (the dispatcher
    processes, through new server connections of the pooler in a pooled run)
    and for this test's own."""
    name = connection.settings_dict["NAME"]
    value = f"{int(offset.total_seconds())} seconds" if offset else ""
    with connection.cursor() as cur:
        if offset:
            cur.execute(f'ALTER DATABASE "{name}" SET punctual.clock_offset = %s', [value])
        else:
            cur.execute(f'ALTER DATABASE "{name}" RESET punctual.clock_offset')
        cur.execute("SELECT set_config('punctual.clock_offset', %s, false)", [value])
    bouncer = pooler.serving()
    if bouncer is not None:  # its pooled server connections predate the change
        bouncer.reconnect()


@pytest.fixture
def clock():
    yield set_clock_offset
    set_clock_offset(None)


def test_a_day_long_outage_of_1000_cron_jobs_recovers_and_the_canary_stays_on_time(
    owner, processes, clock
):
    crons = [
        make_job(owner, name=f"minutely-{k}", cron="* * * * *", target_kind="pull", url="")
        for k in range(CRON_JOBS)
    ]
    canary = make_job(
        owner,
        name="canary",
        interval_seconds=1,
        target_kind="pull",
        url="",
        overlap_policy="allow",
        misfire_grace_seconds=5,
    )

    first = processes.manage("dispatch", name="dispatch-before")
    wait_until(
        lambda: Run.objects.filter(job=canary).count() >= 3,
        timeout=120,
        message="the canary fires before the outage",
    )
    assert processes.stop(first) == 0
    before = dict(
        Job.objects.filter(pk__in=[j.pk for j in crons]).values_list("pk", "next_fire_at")
    )

    clock(OUTAGE)
    restart = db_now()
    second = processes.manage("dispatch", name="dispatch-after")
    crons_qs = Job.objects.filter(pk__in=before)
    wait_until(
        lambda: not crons_qs.filter(next_fire_at__lte=db_now() - 60 * S).exists(),
        timeout=300,
        interval=0.5,
        message="every cron job recovered",
    )
    recovered = db_now()
    # The canary's fires after the restart, across the whole recovery and a
    # few seconds beyond it.
    canary_after = Run.objects.filter(job=canary, scheduled_at__gt=restart)
    wait_until(
        lambda: canary_after.filter(scheduled_at__gte=recovered + 3 * S).exists(),
        timeout=120,
        message="the canary fires after the recovery",
    )
    assert processes.stop(second) == 0

    # Every cron fire of the outage is accounted for: at most 100 rows per
    # job for the outage's fires, the rest in the stored count, none twice
    # and none lost.
    rows = {
        r["job"]: r
        for r in Run.objects.filter(job__in=crons)
        .filter(scheduled_at__gt=restart - OUTAGE)
        .values("job")
        .annotate(
            n=Count("id"),
            missed=Count("id", filter=Q(state="missed", scheduled_at__lte=restart)),
            last=Max("scheduled_at"),
        )
    }
    counts = dict(crons_qs.values_list("pk", "missed_count"))
    assert len(rows) == CRON_JOBS
    for job_id, next_before in before.items():
        row = rows[job_id]
        assert row["missed"] <= 100
        expected = (row["last"] - next_before) // (60 * S) + 1
        assert row["n"] + counts[job_id] == expected, job_id
    missed = sorted(set(counts.values()))

    # The canary: nothing after the restart was missed, and its lag stayed
    # within its 5 s grace while 1,000 jobs recovered.
    late = canary_after.filter(scheduled_at__gte=restart + 2 * S)
    assert late.exists()
    assert not late.exclude(state="pending").exists()
    lags = [(r.created_at - r.scheduled_at).total_seconds() for r in late]

    # The auditor agrees: every fire of every job is a run or counted (the
    # database clock still 24 hours ahead, as the dispatcher saw it).
    report = audit(job_ids=[*before, canary.pk])
    assert report.ok, report.render()

    log = Path(second.log_path).read_text()
    locked = [float(v) for v in re.findall(r"locked_seconds=([0-9.]+)", log)]
    print(
        f"recovery: {len(locked)} ticks recorded misfires, locked {sum(locked):.3f} s in all, "
        f"longest {max(locked, default=0):.3f} s; missed counts per cron job: {missed}; "
        f"canary lag max {max(lags):.3f} s over {len(lags)} fires"
    )
