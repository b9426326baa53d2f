"""The ``e2e`` and ``overload`` scenarios.

- ``e2e``: N interval jobs for D seconds against the loopback receiver (its own
  process), one dispatcher and W workers; deliveries/s, fire lag percentiles
  (delivery start at the receiver minus scheduled_at), duplicate and lost
  fires from the receiver's log, CPU seconds per process. gunicorn runs beside
  them and answers a health probe each second (``--no-web`` leaves it out);
  ``--receiver plain`` swaps the aiohttp receiver for a hand-written asyncio
  one that parses each JSON body (ops/plain_receiver.py).
- ``overload``: ``e2e`` at N jobs, then at 2N: the delivery rate past the
  peak, as a ratio of the rate at it (not part of ``all``).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from django.db import connection
from django.db.models import QuerySet

from ops.bench import BenchFailed, processes
from ops.bench.figures import percentile
from ops.bench.scratch import BENCH_OWNER, bench_owner, insert_jobs, reset


def _receiver_log(path: Path) -> list[dict]:
    entries = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "start":
            entries.append(entry)
    return entries


def _parse_iso(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def scenario_e2e(
    *,
    jobs: int,
    interval: int,
    duration: float,
    workers: int,
    concurrency: int,
    receiver: str = "aiohttp",
    web: bool = True,
    force: bool,
) -> dict:
    """``jobs`` interval jobs firing every ``interval`` s for ``duration`` s,
    each fire one POST to a local receiver; gunicorn runs beside them (``web``)
    and answers a health probe every second, as in a real deployment."""
    from runs.models import Run

    reset(force)
    with tempfile.TemporaryDirectory(prefix="punctual-bench-") as tmp_name:
        tmp = Path(tmp_name)
        receiver_proc, port, log = processes.start_receiver(tmp, receiver)
        web_proc = web_port = None
        if web:
            web_proc, web_port = processes.start_web(tmp)
        insert_jobs(
            jobs, interval=interval, url=f"http://127.0.0.1:{port}/ok", spread=True, overlap="skip"
        )
        with connection.cursor() as cur:
            cur.execute("SELECT now()")
            t_start = cur.fetchone()[0] + dt.timedelta(seconds=2)
        t_stop = t_start + dt.timedelta(seconds=duration)
        postgres_cpu = processes.postgres_cpu_seconds()
        fleet = {"dispatcher": processes.start(["manage.py", "dispatch"], tmp / "dispatch.out")}
        for k in range(workers):
            fleet[f"worker{k}"] = processes.start(
                ["manage.py", "work", "--concurrency", str(concurrency)], tmp / f"work{k}.out"
            )
        health_ms = _until_dispatched(t_stop, duration, web_port)
        window = Run.objects.filter(
            job__owner__username=BENCH_OWNER, scheduled_at__gte=t_start, scheduled_at__lt=t_stop
        )
        cpu = _stop_all(fleet, window, receiver_proc, web_proc)
        postgres_cpu_end = processes.postgres_cpu_seconds()
        if postgres_cpu is not None and postgres_cpu_end is not None:
            # The whole server's, from the workers' start to their stop: the
            # bench's own queries (a few a second) are in it too.
            cpu["postgres"] = postgres_cpu_end - postgres_cpu
        entries = _receiver_log(log)

    states, skipped_rows = _fires_by_state(t_start, t_stop)
    expected = round(jobs * duration / interval)
    rows = sum(states.values())
    succeeded = states.get("succeeded", 0)
    # Lost: a slot with no run at all, or a run that neither succeeded nor was
    # recorded as skipped or missed by the policies.
    lost = max(0, expected - rows) + (
        rows - succeeded - states.get("skipped", 0) - states.get("missed", 0)
    )
    lags, duplicates, redeliveries = _deliveries(entries, t_start, t_stop)
    t0, t1 = t_start.timestamp(), t_stop.timestamp()
    first_start: dict[str, float] = {}
    for e in entries:
        if t0 <= e["t"] < t1:
            first_start.setdefault(e["webhook_id"], e["t"])
    started_in_window = set(first_start)
    # The same deliveries by 5 s of the window: how the rate settles after
    # the fleet starts (under overload, the first pass over every job).
    per_5s = [0] * max(1, int(-(-duration // 5)))
    for w in started_in_window:
        per_5s[int((first_start[w] - t0) // 5)] += 1
    return {
        "offered_per_s": round(jobs / interval, 1),
        "deliveries_per_s": round(len(lags) / duration, 1),
        # Deliveries that started while the load was offered, whatever their
        # fire (first attempts and retries of one id counted once): the rate
        # the install kept up under the load. deliveries_per_s counts the
        # window's fires instead, also those delivered in the drain after it
        # (an install far behind is credited with its late deliveries).
        "delivered_in_window_per_s": round(len(started_in_window) / duration, 1),
        "delivered_in_window_by_5s_per_s": [round(n / 5, 1) for n in per_5s],
        "fires_expected": expected,
        "fires_by_state": states,
        "lag_seconds": {
            "p50": round(percentile(lags, 0.50), 3),
            "p95": round(percentile(lags, 0.95), 3),
            "p99": round(percentile(lags, 0.99), 3),
        },
        "duplicate_fires": duplicates,
        "redeliveries": redeliveries,
        "lost_fires": lost,
        "skipped_overlap": states.get("skipped", 0),
        # The rows those skipped fires took: one per parking (a job whose run
        # was still active), not one per fire.
        "skipped_rows": skipped_rows,
        "cpu_seconds": {k: round(v, 1) for k, v in cpu.items()},
        "health_ms": {
            "p50": round(percentile(health_ms, 0.50), 1),
            "max": round(max(health_ms, default=0.0), 1),
        },
    }


# The bench jobs' fires scheduled in [start, stop), by the state of the run
# that accounts for each: a run stands for its own fire, and the skipped run
# of a parked job for each of its fires (runs/models.py Run.fires; NULL: the
# job was still parked, every fire on), also when it began before start.
# Also the skipped rows written for them.
FIRES_BY_STATE = """
    SELECT r.state, sum(CASE WHEN r.fires = 1 THEN 1 ELSE greatest(0,
               least(coalesce(r.fires, 2147483647),
                     ceil(extract(epoch FROM %(stop)s - r.scheduled_at) / j.interval_seconds))
               - greatest(0, ceil(extract(epoch FROM %(start)s - r.scheduled_at)
                                  / j.interval_seconds))) END)::bigint AS fires,
           count(*) FILTER (WHERE r.scheduled_at >= %(start)s) AS rows
    FROM runs_run AS r JOIN jobs_job AS j ON j.id = r.job_id
    WHERE j.owner_id = %(owner)s AND r.scheduled_at < %(stop)s
      AND (r.scheduled_at >= %(start)s OR NOT (r.fires = 1 AND r.fires IS NOT NULL))
    GROUP BY r.state
"""


def _fires_by_state(start: dt.datetime, stop: dt.datetime) -> tuple[dict[str, int], int]:
    with connection.cursor() as cur:
        cur.execute(FIRES_BY_STATE, {"start": start, "stop": stop, "owner": bench_owner().pk})
        rows = cur.fetchall()
    fires = {state: n for state, n, _rows in rows if n}
    skipped_rows = sum(n for state, _fires, n in rows if state == "skipped")
    return fires, skipped_rows


def _until_dispatched(t_stop: dt.datetime, duration: float, web_port: int | None) -> list[float]:
    """Wait out the measured window, then until every fire in it is
    dispatched: an overloaded dispatcher that runs late makes those fires
    late (their lag counts), not missing. Meanwhile gunicorn's health is
    probed once a second (milliseconds per probe)."""
    health_ms: list[float] = []
    next_probe = time.monotonic()
    dispatched_deadline = time.monotonic() + duration + 120
    while True:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT now() >= %s AND NOT EXISTS (SELECT 1 FROM jobs_job"
                " WHERE owner_id = %s AND next_fire_at < %s)",
                [t_stop + dt.timedelta(seconds=1), bench_owner().pk, t_stop],
            )
            if cur.fetchone()[0] or time.monotonic() > dispatched_deadline:
                break
        if web_port and time.monotonic() >= next_probe:
            next_probe += 1
            health_ms.append(processes.probe_ms(f"http://127.0.0.1:{web_port}/api/v1/health/"))
        time.sleep(0.2)
    return health_ms


def _stop_all(
    fleet: dict[str, subprocess.Popen],
    window: QuerySet,
    receiver: subprocess.Popen,
    web: subprocess.Popen | None,
) -> dict[str, float]:
    """Stop the dispatcher, give the workers up to 60 s to finish the
    window's runs, then stop them, the receiver and gunicorn: the CPU
    seconds each used, read just before it stopped."""
    cpu = {"receiver": 0.0}
    cpu["dispatcher"] = processes.cpu_seconds(fleet["dispatcher"].pid)
    processes.stop(fleet["dispatcher"])
    deadline = time.monotonic() + 60
    while window.filter(state__in=["pending", "running", "retrying"]).exists():
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for name, proc in fleet.items():
        if name.startswith("worker"):
            cpu[name] = processes.cpu_seconds(proc.pid)
            processes.stop(proc)
    cpu["receiver"] = processes.cpu_seconds(receiver.pid)
    processes.stop(receiver)
    if web is not None:
        cpu["web"] = processes.tree_cpu_seconds(web.pid)
        processes.stop(web)
    return cpu


def _deliveries(
    entries: list[dict], t_start: dt.datetime, t_stop: dt.datetime
) -> tuple[list[float], int, int]:
    """From the receiver's log, the deliveries of fires scheduled in the
    window: each delivery's lag (its first start minus its fire), the fires
    delivered under more than one id, and the repeated deliveries of one id."""
    t0, t1 = t_start.timestamp(), t_stop.timestamp()
    in_window = [
        e for e in entries if e["scheduled_at"] and t0 <= _parse_iso(e["scheduled_at"]) < t1
    ]
    deliveries_per_fire: dict[tuple, set] = defaultdict(set)
    seen_ids: dict[str, int] = defaultdict(int)
    lags = []
    for e in in_window:
        deliveries_per_fire[(e["job_id"], e["scheduled_at"])].add(e["webhook_id"])
        seen_ids[e["webhook_id"]] += 1
        if seen_ids[e["webhook_id"]] == 1:
            lags.append(e["t"] - _parse_iso(e["scheduled_at"]))
    duplicates = sum(1 for ids in deliveries_per_fire.values() if len(ids) > 1)
    redeliveries = sum(n - 1 for n in seen_ids.values() if n > 1)
    return lags, duplicates, redeliveries


def scenario_overload(*, jobs: int, **e2e) -> dict:
    """``e2e`` at ``jobs`` (the load where deliveries peak, found by running
    e2e at rising loads), then at twice as many jobs: past its peak an
    install should deliver about as much, not less, and account for every
    fire (the overlap policy records the ones it cannot run as skipped).
    The figure is the ratio of the two delivery rates: deliveries started
    while the load was offered (``twice_over_peak``), and, beside it, the
    window's fires delivered (``twice_over_peak_window_fires``). Past the
    peak, under overlap ``skip``, each job delivers one fire in k for a k
    set by the queue, so the second counts k's steps (5 or 6 of 6 fires), not
    the deliveries made."""
    at_peak = scenario_e2e(jobs=jobs, **e2e)
    at_twice = scenario_e2e(jobs=2 * jobs, **e2e)
    for run in (at_peak, at_twice):
        if run["duplicate_fires"] or run["lost_fires"]:
            raise BenchFailed(f"duplicate or lost fires: {run}")
    return {
        "at_peak": at_peak,
        "at_twice": at_twice,
        **{
            name: round(at_twice[rate] / at_peak[rate], 3) if at_peak[rate] else None
            for name, rate in (
                ("twice_over_peak", "delivered_in_window_per_s"),
                ("twice_over_peak_window_fires", "deliveries_per_s"),
            )
        },
    }
