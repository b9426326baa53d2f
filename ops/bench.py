"""``manage.py bench``: the README "Benchmarks" scenarios, measured on PostgreSQL.

Each scenario prints one JSON object (parameters, machine, figures), so runs
can be compared. Figures from repeated runs are medians. The bench works in
the configured database, which must be a scratch database: it refuses one that
holds jobs it did not make, unless ``--force``.

- ``dispatch``: N interval jobs of which M are due; fires/s for one dispatcher
  (in this process) and for two (two processes sharing the due set).
- ``scale``: the same with 1,000,000 jobs and 100,000 due: the cost should
  follow the due work, not the table size.
- ``e2e``: N interval jobs for D seconds against the loopback receiver (its own
  process), one dispatcher and W workers; deliveries/s, fire lag percentiles
  (delivery start at the receiver minus scheduled_at), duplicate and lost
  fires from the receiver's log, CPU seconds per process. gunicorn runs beside
  them and answers a health probe each second (``--no-web`` leaves it out);
  ``--receiver plain`` swaps the aiohttp receiver for a hand-written asyncio
  one that parses each JSON body (ops/plain_receiver.py).
- ``overload``: ``e2e`` at N jobs, then at 2N: the delivery rate past the
  peak, as a ratio of the rate at it (not part of ``all``).
- ``slow``: K deliveries to a receiver that answers after S seconds, held by W
  workers; the most in flight at once, each worker's peak RSS, completion rate.
- ``recovery``: N per-minute cron jobs whose next fire was 24 hours ago (a
  day-long outage); the time each locked tick takes to drain them, and a check
  that each job got exactly 100 missed rows and every other fire counted.
- ``audit``: ``manage.py audit_fires`` over 10,000 jobs and 1,000,000 runs
  (not part of ``all``); seconds per audit.
- ``create``: jobs created through the public API, over real HTTP, against
  gunicorn (its own process, configured as the Procfile's web process): single
  creates from one client and from several, and bulk creates of up to 1,000
  jobs per request; jobs/s, gunicorn's CPU per job, PostgreSQL's CPU per
  single create (when the server is on this host), and a check that every
  job got its schedule span and its audit event.
- ``idle``: W idle ``manage.py work`` processes (default 50), nothing due:
  the database's transactions per second over a window (pg_stat_database;
  statements too when pg_stat_statements is loaded), in all and per worker;
  then the wake-up latency, from a manual trigger's commit to its run's
  claim, over K triggers. ``PUNCTUAL_LISTEN=false`` in the bench's
  environment measures a polling fleet instead (not part of ``all``).
- ``history``: dispatch, claim and complete rates (rows/s) and the runs
  admin's pages (ms) on an empty runs table, then again over
  ``--history-runs`` finished runs (default 50 million) spread over the past
  30 days, one daily partition each, with their attempts; and the ratio
  (not part of ``all``).
- ``login``: health latency (p50, p99) against gunicorn, first alone, then
  while C threads (default 8) post wrong passwords to the admin's sign-in
  form; the answers by status, and a check that the sign-in limits locked the
  threads out after at most the limit's worth of hashed passwords (not part
  of ``all``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from jobs import crypto, history
from jobs.limits import OWNER_LIMITS
from runs import identity

BENCH_OWNER = "punctual-bench"
ROOT = Path(settings.BASE_DIR)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BenchRefused(Exception):
    pass


class BenchFailed(Exception):
    """A scenario's own invariant did not hold (raised, never asserted, so
    ``python -O`` cannot skip the check)."""


# -- the database ------------------------------------------------------------


def bench_owner():
    """The owner of every bench job. Its limits (README "Owner limits") are
    the highest an override takes: the bench creates thousands of jobs and
    triggers one job many times a minute."""
    from jobs.models import OwnerLimits

    user, _ = get_user_model().objects.get_or_create(
        username=BENCH_OWNER, defaults={"is_active": False}
    )
    lifted = {name: bounds.max for name, (_setting, bounds) in OWNER_LIMITS.items()}
    lifted["min_interval_seconds"] = OWNER_LIMITS["min_interval_seconds"][1].min
    OwnerLimits.objects.update_or_create(
        owner=user, defaults={**lifted, "note": "the benchmark's owner"}
    )
    return user


def check_scratch(force: bool) -> None:
    if connection.vendor != "postgresql":
        raise BenchRefused("the bench measures PostgreSQL: set DATABASE_URL=postgres://...")
    from jobs.models import Job

    foreign = Job.objects.exclude(owner__username=BENCH_OWNER).count()
    if foreign and not force:
        raise BenchRefused(
            f"this database holds {foreign} jobs the bench did not make; "
            "point DATABASE_URL at a scratch database, or pass --force"
        )


def reset(force: bool) -> None:
    """Remove the bench's jobs and runs (everything, on a pure scratch database)."""
    with connection.cursor() as cur:
        if not force:
            cur.execute(
                "TRUNCATE runs_attempt, runs_run, jobs_jobevent, jobs_schedulespan, jobs_job"
                " CASCADE"
            )
        else:
            owner = bench_owner().pk
            sub = "SELECT id FROM jobs_job WHERE owner_id = %s"
            cur.execute(
                f"DELETE FROM runs_attempt WHERE run_id IN "
                f"(SELECT id FROM runs_run WHERE job_id IN ({sub}))",
                [owner],
            )
            cur.execute(f"DELETE FROM runs_run WHERE job_id IN ({sub})", [owner])
            cur.execute(f"DELETE FROM jobs_jobevent WHERE job_id IN ({sub})", [owner])
            cur.execute(f"DELETE FROM jobs_schedulespan WHERE job_id IN ({sub})", [owner])
            cur.execute("DELETE FROM jobs_job WHERE owner_id = %s", [owner])


# One transaction: the schedule-history guard checks each new job at commit,
# after open_missing_spans has given it its span.
@transaction.atomic
def insert_jobs(
    count: int,
    *,
    interval: int,
    due: int = 0,
    url: str = "http://127.0.0.1:9/",
    spread: bool = False,
    overlap: str = "skip",
    timeout: int = 30,
    name: str = "bench-",
    owner: int | None = None,
) -> None:
    """Insert ``count`` interval jobs in one statement; the first ``due`` are due
    now, the rest a day from now. ``spread`` staggers the anchors evenly over
    one interval, as a real fleet's are, instead of all firing at once. The
    jobs are the bench owner's, or ``owner``'s (a user's id)."""
    owner = bench_owner().pk if owner is None else owner
    secret = crypto.encrypt(crypto.generate_secret())
    with connection.cursor() as cur:
        cur.execute(
            """
            WITH base AS (SELECT date_trunc('second', now()) + interval '2 seconds' AS t0)
            INSERT INTO jobs_job (
                id, owner_id, name, description, cron, interval_seconds, timezone,
                target_kind, url, payload, timeout_seconds, max_attempts,
                retry_backoff_seconds, misfire_policy, max_catchup, misfire_grace_seconds,
                overlap_policy, jitter_seconds, state, pause_note, consecutive_failures,
                next_fire_at, secret_encrypted, previous_secret_encrypted, version,
                created_at, updated_at, start_at)
            SELECT gen_random_uuid(), %(owner)s, %(name)s || g, '', NULL, %(interval)s, 'UTC',
                   'webhook', %(url)s, '{"bench": true}', %(timeout)s, 3, 1, 'skip', 3, 60,
                   %(overlap)s, 0, 'active', '', 0,
                   CASE WHEN g <= %(due)s THEN now() - interval '1 second'
                        WHEN %(spread)s THEN base.t0 + (g %% %(count)s) * %(step)s
                        ELSE now() + interval '1 day' END,
                   %(secret)s, '', 1, now(), now(),
                   CASE WHEN %(spread)s THEN base.t0 + (g %% %(count)s) * %(step)s END
            FROM generate_series(1, %(count)s) AS g, base
            """,
            {
                "owner": owner,
                "interval": interval,
                "url": url,
                "timeout": timeout,
                "overlap": overlap,
                "due": due,
                "spread": spread,
                "count": count,
                # psycopg adapts a timedelta to an interval; the stubs' list of SQL types omits it.
                "step": dt.timedelta(seconds=interval) / max(count, 1),  # type: ignore[dict-item]
                "secret": secret,
                "name": name,
            },
        )
    # Jobs inserted by SQL get their schedule history by SQL too.
    history.open_missing_spans(db_now())
    with connection.cursor() as cur:
        cur.execute("ANALYZE jobs_job")


def cpu_model() -> str:
    """The CPU's model name, as the kernel reports it (/proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    """Where a figure holds: the machine (its CPU model and cores) and the
    server (its version, whether it can JIT-compile, and the jit setting of
    Punctual's sessions: README "Supported servers")."""
    with connection.cursor() as cur:
        cur.execute("SELECT current_setting('server_version'), current_setting('jit')")
        pg, jit = cur.fetchone()
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "postgresql": pg,
        "jit_available": jit_available(),
        "jit": jit,
        "platform": platform.platform(),
    }


def jit_available() -> bool:
    """Whether the server can JIT-compile. ``pg_jit_available()`` answers
    false while ``jit`` is off, as Punctual's sessions have it: asked with
    it on, for one transaction."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL jit = on")
        cur.execute("SELECT pg_jit_available()")
        return bool(cur.fetchone()[0])


def describe_machine(figures: dict) -> str:
    """``machine()`` as one line for a person."""
    jit = "JIT available" if figures["jit_available"] else "no JIT"
    if figures["jit_available"]:
        jit += f", jit = {figures['jit']}"
    return (
        f"PostgreSQL {figures['postgresql']} ({jit}); CPU {figures['cpu_model']},"
        f" {figures['cores']} cores; Python {figures['python']}"
    )


def median_of(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else 0.0


# -- dispatch and scale ---------------------------------------------------------


def drain(batch_size: int, shard: tuple[int, int] | None = None) -> dict:
    """Tick until nothing is due; the figures of one dispatcher."""
    d = Dispatcher(batch_size=batch_size, shard=shard)
    runs = 0
    t0 = time.time()
    while True:
        result = d.tick()
        runs += result.runs
        if result.jobs == 0:
            break
    return {"t0": t0, "t1": time.time(), "runs": runs}


def scenario_dispatch(*, jobs: int, due: int, batch: int, repeat: int, force: bool) -> dict:
    one, two = [], []
    for _ in range(repeat):
        reset(force)
        insert_jobs(jobs, interval=60, due=due)
        r = drain(batch)
        one.append(r["runs"] / (r["t1"] - r["t0"]))
        assert r["runs"] == due, f"expected {due} fires, made {r['runs']}"

        reset(force)
        insert_jobs(jobs, interval=60, due=due)
        procs = [
            subprocess.Popen(
                [sys.executable, "manage.py", "bench", "drain", "--batch-size", str(batch)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
        made = sum(o["runs"] for o in outs)
        assert made == due, f"two dispatchers made {made} fires for {due} due"
        span = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
        two.append(made / span)
    return {
        "fires_per_s_one_dispatcher": median_of(one),
        "fires_per_s_two_dispatchers": median_of(two),
        "runs": {"one": [round(x) for x in one], "two": [round(x) for x in two]},
    }


def scenario_scale(*, jobs: int, due: int, batch: int, repeat: int, force: bool) -> dict:
    rates = []
    for _ in range(repeat):
        reset(force)
        insert_jobs(jobs, interval=60, due=due)
        r = drain(batch)
        rates.append(r["runs"] / (r["t1"] - r["t0"]))
    return {"fires_per_s_one_dispatcher": median_of(rates), "runs": [round(x) for x in rates]}


def insert_cron_jobs(count: int, *, cron: str, behind: dt.timedelta) -> dt.datetime:
    """Insert ``count`` cron jobs (skip policy, 60 s grace) created, and next
    due, ``behind`` ago on the minute, as after an outage of that length.
    Returns that first fire."""
    owner = bench_owner().pk
    secret = crypto.encrypt(crypto.generate_secret())
    first = db_now().replace(second=0, microsecond=0) - behind
    # One transaction: the schedule-history guard checks at commit that every
    # inserted job has its span.
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO jobs_job (
                id, owner_id, name, description, cron, interval_seconds, timezone,
                target_kind, url, payload, timeout_seconds, max_attempts,
                retry_backoff_seconds, misfire_policy, max_catchup, misfire_grace_seconds,
                overlap_policy, jitter_seconds, state, pause_note, consecutive_failures,
                next_fire_at, secret_encrypted, previous_secret_encrypted, version,
                created_at, updated_at, start_at)
            SELECT gen_random_uuid(), %(owner)s, 'bench-' || g, '', %(cron)s, NULL, 'UTC',
                   'webhook', 'http://127.0.0.1:9/', '{"bench": true}', 30, 3, 1, 'skip', 3,
                   60, 'skip', 0, 'active', '', 0,
                   %(first)s, %(secret)s, '', 1, %(first)s, %(first)s, NULL
            FROM generate_series(1, %(count)s) AS g
            """,
            {"owner": owner, "cron": cron, "first": first, "count": count, "secret": secret},
        )
        # Jobs inserted by SQL get their schedule history by SQL too.
        history.open_missing_spans(first)
    with connection.cursor() as cur:
        cur.execute("ANALYZE jobs_job")
    return first


# Per job: its missed rows, all its rows, its latest fire with a row, and the
# fires it counted without a row (on the job and on its open schedule span).
RECOVERY_CHECK = """
    SELECT j.id, count(*) FILTER (WHERE r.state = 'missed') AS missed, count(*) AS runs,
           max(r.scheduled_at) AS last_fire, j.missed_count, j.missed_since,
           s.missed_count AS span_missed_count
    FROM jobs_job AS j
    JOIN runs_run AS r ON r.job_id = j.id
    JOIN jobs_schedulespan AS s ON s.job_id = j.id AND s.ended_at IS NULL
    GROUP BY j.id, s.id
"""


def scenario_recovery(*, jobs: int, batch: int, repeat: int, force: bool) -> dict:
    """Drain ``jobs`` per-minute cron jobs a day behind, timing each tick (one
    transaction, so the time the jobs stay locked), and check the outcome."""
    from runs.planning import MAX_MISSED_ROWS

    behind = dt.timedelta(hours=24)
    totals, longest, ticks = [], [], []
    counts: set[tuple[int, int, int]] = set()
    for _ in range(repeat):
        reset(force)
        first_fire = insert_cron_jobs(jobs, cron="* * * * *", behind=behind)
        d = Dispatcher(batch_size=batch)
        durations = []
        while True:
            t0 = time.perf_counter()
            result = d.tick()
            durations.append(time.perf_counter() - t0)
            if result.jobs == 0:
                break
        totals.append(sum(durations))
        longest.append(max(durations))
        ticks.append(len(durations) - 1)
        with connection.cursor() as cur:
            cur.execute(RECOVERY_CHECK)
            rows = cur.fetchall()
        assert len(rows) == jobs, f"{len(rows)} of {jobs} jobs got runs"
        for _job, missed, runs, last_fire, counted, since, span_counted in rows:
            assert missed == MAX_MISSED_ROWS, f"a job got {missed} missed rows"
            # Every fire from the first to the last with a row is a row or
            # counted, exactly: (last - first) / 1 min + 1 of them.
            fires = (last_fire - first_fire) // dt.timedelta(minutes=1) + 1
            assert counted == fires - runs, f"counted {counted}, expected {fires - runs}"
            assert span_counted == counted and since == first_fire
            counts.add((fires, runs, counted))
    return {
        "behind_hours": behind.total_seconds() / 3600,
        "first_fire": first_fire.isoformat(),
        "locked_s_total": round(statistics.median(totals), 3),
        "locked_s_longest_tick": round(statistics.median(longest), 3),
        "ticks": ticks,
        # (fires due, rows written, fires counted) per job, as seen in the runs
        "fires_rows_counted": sorted(counts),
        "runs": {
            "total_s": [round(x, 3) for x in totals],
            "longest_s": [round(x, 3) for x in longest],
        },
    }


# -- processes ------------------------------------------------------------------


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("PUNCTUAL_ALLOW_PRIVATE_TARGETS", "true")
    env["PUNCTUAL_ALLOW_PRIVATE_TARGETS"] = "true"
    env["PUNCTUAL_LOG_LEVEL"] = "WARNING"
    return env


def _start(args: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env={**_env(), **(env or {})},
        stdout=open(log, "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


RECEIVERS = {
    # The aiohttp app the process tests use too, logging only what the bench audits.
    "aiohttp": ["-m", "ops.loopback_receiver", "--lean"],
    # A hand-written asyncio receiver that parses every JSON body.
    "plain": ["-m", "ops.plain_receiver"],
}


def _start_receiver(tmp: Path, kind: str = "aiohttp") -> tuple[subprocess.Popen, int, Path]:
    port_file, log = tmp / "receiver.port", tmp / "receiver.jsonl"
    proc = _start(
        [*RECEIVERS[kind], "--log", str(log), "--port-file", str(port_file)],
        tmp / "receiver.out",
    )
    return proc, _wait_for_port(port_file, proc, "the receiver"), log


def _wait_for_port(port_file: Path, proc: subprocess.Popen, what: str) -> int:
    deadline = time.monotonic() + 30
    while not port_file.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.05)
    return int(port_file.read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_web(
    tmp: Path,
    *,
    workers: int = 2,
    threads: int = 4,
    env: dict | None = None,
    port: int | None = None,
) -> tuple[subprocess.Popen, int]:
    """gunicorn as the Procfile runs it (2 processes, 4 threads), on ``port``
    or a free one; returns once its health endpoint answers (200 or 503)."""
    import requests

    port = port or _free_port()
    log = tmp / "web.out"
    proc = _start(
        [
            "-m",
            "gunicorn",
            "scheduler_site.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--graceful-timeout",
            "4",
        ],
        log,
        env,
    )
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise BenchFailed("gunicorn exited: " + log.read_text()[-2000:])
        try:
            requests.get(f"http://127.0.0.1:{port}/api/v1/health/", timeout=10)
            return proc, port
        except requests.RequestException:
            pass  # not listening yet
        if time.monotonic() > deadline:
            _stop(proc)
            raise BenchFailed("gunicorn did not answer within 120 s")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


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
        receiver_proc, port, log = _start_receiver(tmp, receiver)
        web_proc = web_port = None
        if web:
            web_proc, web_port = _start_web(tmp)
        insert_jobs(
            jobs, interval=interval, url=f"http://127.0.0.1:{port}/ok", spread=True, overlap="skip"
        )
        with connection.cursor() as cur:
            cur.execute("SELECT now()")
            t_start = cur.fetchone()[0] + dt.timedelta(seconds=2)
        postgres_cpu = _postgres_cpu_seconds()
        procs = {"dispatcher": _start(["manage.py", "dispatch"], tmp / "dispatch.out")}
        for k in range(workers):
            procs[f"worker{k}"] = _start(
                ["manage.py", "work", "--concurrency", str(concurrency)], tmp / f"work{k}.out"
            )
        t_stop = t_start + dt.timedelta(seconds=duration)
        health_ms: list[float] = []
        next_probe = time.monotonic()
        # The measured window, then until every fire in it is dispatched: an
        # overloaded dispatcher that runs late makes those fires late (their
        # lag counts), not missing.
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
                health_ms.append(_probe_ms(f"http://127.0.0.1:{web_port}/api/v1/health/"))
            time.sleep(0.2)
        cpu = {"receiver": 0.0}
        cpu["dispatcher"] = _cpu_seconds(procs["dispatcher"].pid)
        _stop(procs["dispatcher"])
        window = Run.objects.filter(
            job__owner__username=BENCH_OWNER, scheduled_at__gte=t_start, scheduled_at__lt=t_stop
        )
        deadline = time.monotonic() + 60
        while window.filter(state__in=["pending", "running", "retrying"]).exists():
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for name, proc in procs.items():
            if name.startswith("worker"):
                cpu[name] = _cpu_seconds(proc.pid)
                _stop(proc)
        cpu["receiver"] = _cpu_seconds(receiver_proc.pid)
        _stop(receiver_proc)
        if web_proc is not None:
            cpu["web"] = _tree_cpu_seconds(web_proc.pid)
            _stop(web_proc)
        postgres_cpu_end = _postgres_cpu_seconds()
        if postgres_cpu is not None and postgres_cpu_end is not None:
            # The whole server's, from the workers' start to their stop: the
            # bench's own queries (a few a second) are in it too.
            cpu["postgres"] = postgres_cpu_end - postgres_cpu
        entries = _receiver_log(log)

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
    states: defaultdict[str, int] = defaultdict(int)
    for state in window.values_list("state", flat=True):
        states[state] += 1
    expected = round(jobs * duration / interval)
    rows = sum(states.values())
    succeeded = states.get("succeeded", 0)
    # Lost: a slot with no run at all, or a run that neither succeeded nor was
    # recorded as skipped or missed by the policies.
    lost = max(0, expected - rows) + (
        rows - succeeded - states.get("skipped", 0) - states.get("missed", 0)
    )
    return {
        "offered_per_s": round(jobs / interval, 1),
        "deliveries_per_s": round(len(lags) / duration, 1),
        "fires_expected": expected,
        "runs_by_state": dict(states),
        "lag_seconds": {
            "p50": round(_percentile(lags, 0.50), 3),
            "p95": round(_percentile(lags, 0.95), 3),
            "p99": round(_percentile(lags, 0.99), 3),
        },
        "duplicate_fires": sum(1 for ids in deliveries_per_fire.values() if len(ids) > 1),
        "redeliveries": sum(n - 1 for n in seen_ids.values() if n > 1),
        "lost_fires": lost,
        "skipped_overlap": states.get("skipped", 0),
        "cpu_seconds": {k: round(v, 1) for k, v in cpu.items()},
        "health_ms": {
            "p50": round(_percentile(health_ms, 0.50), 1),
            "max": round(max(health_ms, default=0.0), 1),
        },
    }


def scenario_overload(*, jobs: int, **e2e) -> dict:
    """``e2e`` at ``jobs`` (the load where deliveries peak, found by running
    e2e at rising loads), then at twice as many jobs: past its peak an
    install should deliver about as much, not less, and account for every
    fire (the overlap policy records the ones it cannot run as skipped).
    The figure is the ratio of the two delivery rates."""
    at_peak = scenario_e2e(jobs=jobs, **e2e)
    at_twice = scenario_e2e(jobs=2 * jobs, **e2e)
    for run in (at_peak, at_twice):
        if run["duplicate_fires"] or run["lost_fires"]:
            raise BenchFailed(f"duplicate or lost fires: {run}")
    return {
        "at_peak": at_peak,
        "at_twice": at_twice,
        "twice_over_peak": round(at_twice["deliveries_per_s"] / at_peak["deliveries_per_s"], 3)
        if at_peak["deliveries_per_s"]
        else None,
    }


def _probe_ms(url: str) -> float:
    import requests

    t0 = time.monotonic()
    try:
        requests.get(url, timeout=10)
    except requests.RequestException:
        pass
    return (time.monotonic() - t0) * 1000


def _children_cpu_seconds(pid: int) -> float:
    """CPU of a process's live children (gunicorn's worker processes)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        total += sum(_cpu_seconds(int(c)) for c in children)
    return total


def scenario_slow(*, inflight: int, delay: float, workers: int, force: bool) -> dict:
    from runs.models import Run

    reset(force)
    with tempfile.TemporaryDirectory(prefix="punctual-bench-") as tmp_name:
        tmp = Path(tmp_name)
        receiver, port, log = _start_receiver(tmp)
        insert_jobs(
            inflight,
            interval=3600,
            due=inflight,
            url=f"http://127.0.0.1:{port}/slow/{delay}",
            overlap="allow",
            timeout=max(30, int(delay * 10)),
        )
        Dispatcher(batch_size=5000).run_once()
        per_worker = -(-inflight // workers)
        procs = [
            _start(
                ["manage.py", "work", "--concurrency", str(per_worker), "--lease-seconds", "60"],
                tmp / f"work{k}.out",
            )
            for k in range(workers)
        ]
        import requests

        peak, rss = 0, [0.0] * workers
        t_begin = time.monotonic()
        done = Run.objects.filter(job__owner__username=BENCH_OWNER, state="succeeded")
        while time.monotonic() - t_begin < 600:
            stats = requests.get(f"http://127.0.0.1:{port}/stats", timeout=10).json()
            peak = max(peak, stats["max_in_flight"])
            rss = [max(r, _rss_mb(p.pid)) for r, p in zip(rss, procs, strict=True)]
            if stats["count"] >= inflight and stats["in_flight"] == 0:
                break
            time.sleep(0.2)
        while done.count() < inflight and time.monotonic() - t_begin < 600:
            time.sleep(0.2)
        elapsed = time.monotonic() - t_begin
        succeeded = done.count()
        for p in procs:
            _stop(p)
        _stop(receiver)
    return {
        "max_in_flight": peak,
        "worker_rss_mb": [round(r) for r in rss],
        "succeeded": succeeded,
        "completion_per_s": round(succeeded / elapsed, 1),
        "elapsed_s": round(elapsed, 1),
    }


# -- idle -----------------------------------------------------------------------

# The database's transactions so far (the bench's own few are counted too).
DATABASE_XACTS = """
    SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()
"""
# The statements run so far, when pg_stat_statements is installed and loaded.
STATEMENT_CALLS = """
    SELECT sum(calls)::bigint FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def _database_counters() -> tuple[int, int | None]:
    """(transactions, statements or None), read afresh: statistics are
    cached per transaction, and this connection is in autocommit."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(DATABASE_XACTS)
        xacts = cur.fetchone()[0]
        cur.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'")
        if not cur.fetchone():
            return xacts, None
        try:
            with transaction.atomic():
                cur.execute(STATEMENT_CALLS)
                return xacts, cur.fetchone()[0]
        except DatabaseError:
            return xacts, None  # installed, but not in shared_preload_libraries


def _wait_for(predicate, timeout: float, what: str, procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a process exited while waiting for {what}")
        time.sleep(0.05)


# LISTEN connections of the bench's workers (dispatch/wakeup.py names them).
IDLE_LISTENERS = """
    SELECT count(*) FROM pg_stat_activity
    WHERE application_name LIKE 'punctual-listen bench-idle-%%' AND query ILIKE 'LISTEN %%'
"""


def _check_connections_for(workers: int) -> None:
    """Refuse at once, naming the setting, when the server cannot take the
    fleet's connections: each worker holds two (its database connection and
    its LISTEN connection). Otherwise the workers fail to connect and the
    bench would wait out its timeouts."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT current_setting('max_connections')::int"
            " - current_setting('superuser_reserved_connections')::int"
            " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        )
        free = cur.fetchone()[0]
    needed = 2 * workers
    if free < needed:
        raise BenchFailed(
            f"{workers} idle workers need {needed} connections and the server has {free}"
            " free: raise max_connections (ALTER SYSTEM SET max_connections = ..., then"
            " restart it) or ask for fewer --workers"
        )


def scenario_idle(*, workers: int, window: float, wakeups: int, force: bool) -> dict:
    """What an idle fleet costs the database, and how fast it wakes up."""
    from dispatch.models import ProcessHeartbeat
    from jobs.models import Job
    from runs import job_verbs
    from runs.models import Run

    reset(force)
    _check_connections_for(workers)
    fleet = ProcessHeartbeat.objects.filter(name__startswith="bench-idle-")
    fleet.delete()
    latencies: list[float] = []
    with tempfile.TemporaryDirectory(prefix="punctual-bench-") as tmp_name:
        tmp = Path(tmp_name)
        receiver, port, _log = _start_receiver(tmp)
        insert_jobs(1, interval=86_400, url=f"http://127.0.0.1:{port}/ok", overlap="allow")
        job = Job.objects.get(owner__username=BENCH_OWNER)
        procs = [
            _start(
                ["manage.py", "work", "--concurrency", "10", "--name", f"bench-idle-{k}"],
                tmp / f"work{k}.out",
            )
            for k in range(workers)
        ]
        try:
            _wait_for(
                lambda: fleet.count() >= workers, 600, f"{workers} workers' fleet rows", procs
            )
            if settings.PUNCTUAL_LISTEN:

                def listening() -> bool:
                    with connection.cursor() as cur:
                        cur.execute(IDLE_LISTENERS)
                        return cur.fetchone()[0] >= workers

                _wait_for(listening, 600, f"{workers} LISTEN connections", procs)
            time.sleep(2)  # past every worker's start-up claims
            xacts0, calls0 = _database_counters()
            t0 = time.monotonic()
            time.sleep(window)
            xacts1, calls1 = _database_counters()
            elapsed = time.monotonic() - t0

            for _ in range(wakeups):
                with transaction.atomic():
                    run = job_verbs.trigger(job)
                    with connection.cursor() as cur:
                        cur.execute("SELECT clock_timestamp()")  # the last statement before commit
                        committed = cur.fetchone()[0]
                claimed = Run.objects.filter(pk=run.pk, started_at__isnull=False)
                _wait_for(claimed.exists, 120, "a triggered run to be claimed", procs)
                started = claimed.values_list("started_at", flat=True).get()
                # Negative when a polling claim read its clock before the
                # commit and ran its query after: counted, and as 0.
                latencies.append((started - committed).total_seconds() * 1000)
                succeeded = Run.objects.filter(pk=run.pk, state="succeeded")
                _wait_for(succeeded.exists, 120, "a triggered run to succeed", procs)
                time.sleep(0.2)  # the worker that delivered it goes idle again
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                _stop(p)
            _stop(receiver)
    if len(latencies) != wakeups:  # not an assert: python -O must not skip it
        raise RuntimeError(f"{len(latencies)} of {wakeups} wake-ups measured")
    xacts_per_s = (xacts1 - xacts0) / elapsed
    calls_per_s = None if calls0 is None or calls1 is None else (calls1 - calls0) / elapsed
    return {
        "listen": settings.PUNCTUAL_LISTEN,
        "poll_seconds": settings.PUNCTUAL_POLL_SECONDS if settings.PUNCTUAL_LISTEN else 0.1,
        "window_s": round(elapsed, 1),
        "transactions_per_s": round(xacts_per_s, 1),
        "transactions_per_s_per_worker": round(xacts_per_s / workers, 2),
        "statements_per_s": None if calls_per_s is None else round(calls_per_s, 1),
        "statements_per_s_per_worker": (
            None if calls_per_s is None else round(calls_per_s / workers, 2)
        ),
        "wakeup_ms": {
            "p50": round(max(0.0, statistics.median(latencies)), 1),
            "p95": round(max(0.0, _percentile(latencies, 0.95)), 1),
            "max": round(max(0.0, *latencies), 1),
        },
        "wakeups": len(latencies),
        "claims_begun_before_commit": sum(1 for ms in latencies if ms < 0),
    }


# -- audit ----------------------------------------------------------------------


def scenario_audit(*, jobs: int, runs_per_job: int, cron_share: float, repeat: int, force: bool):
    """The fire auditor over a history of ``jobs`` jobs with ``runs_per_job``
    runs each, every slot accounted for: per-minute jobs (interval 60 s, and a
    ``cron_share`` of them ``* * * * *``) created ``runs_per_job`` minutes
    ago. Jobs, runs and spans are inserted by SQL; the audit must come out
    clean, and its time is the figure."""
    from ops.audit import audit

    reset(force)
    owner = bench_owner().pk
    secret = crypto.encrypt(crypto.generate_secret())
    crons = round(jobs * cron_share)
    # One transaction: the schedule-history guard checks at commit that every
    # job inserted has its span.
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT date_trunc('minute', now()) - %s * interval '1 minute'", [runs_per_job])
        base = cur.fetchone()[0]
        cur.execute(
            """
            INSERT INTO jobs_job (
                id, owner_id, name, description, cron, interval_seconds, timezone,
                target_kind, url, payload, timeout_seconds, max_attempts,
                retry_backoff_seconds, misfire_policy, max_catchup, misfire_grace_seconds,
                overlap_policy, jitter_seconds, state, pause_note, consecutive_failures,
                next_fire_at, secret_encrypted, previous_secret_encrypted, version,
                created_at, updated_at)
            SELECT gen_random_uuid(), %(owner)s, 'bench-audit-' || g, '',
                   CASE WHEN g <= %(crons)s THEN '* * * * *' END,
                   CASE WHEN g > %(crons)s THEN 60 END, 'UTC',
                   'webhook', 'http://127.0.0.1:9/', '{}', 30, 3, 1, 'skip', 3, 60, 'skip', 0,
                   'active', '', 0, %(base)s + (%(n)s + 1) * interval '1 minute',
                   %(secret)s, '', 1, %(base)s, now()
            FROM generate_series(1, %(jobs)s) AS g
            """,
            {
                "owner": owner,
                "crons": crons,
                "jobs": jobs,
                "base": base,
                "n": runs_per_job,
                "secret": secret,
            },
        )
        history.open_missing_spans(base)
        # Each run gets its fire's id (runs/identity.py), as every real path
        # gives it; PostgreSQL cannot make them, so they are hashed here, a
        # thousand jobs' runs per statement.
        cur.execute("SELECT id::text FROM jobs_job WHERE owner_id = %s", [owner])
        job_ids = [job_id for (job_id,) in cur.fetchall()]
        slots = [
            (k, identity.utc_text(base + dt.timedelta(minutes=k)))
            for k in range(1, runs_per_job + 1)
        ]
        for start in range(0, len(job_ids), 1000):
            rows = [(j, k, f"{j}/{at}") for j in job_ids[start : start + 1000] for k, at in slots]
            cur.execute(
                """
                INSERT INTO runs_run (
                    id, job_id, scheduled_at, kind, state, reason, attempt, max_attempts,
                    available_at, lease_owner, created_at, started_at, finished_at, last_error,
                    target_kind, exclusive)
                SELECT r.id, r.job_id, %(base)s + r.k * interval '1 minute', 'scheduled',
                       'succeeded', '', 1, 3, NULL, '', now(), now(), now(), '', 'webhook', true
                FROM unnest(%(ids)s::uuid[], %(jobs)s::uuid[], %(ks)s::int[])
                     AS r(id, job_id, k)
                """,
                {
                    "base": base,
                    "ids": identity.ids_for_names([name for _, _, name in rows]),
                    "jobs": [j for j, _, _ in rows],
                    "ks": [k for _, k, _ in rows],
                },
            )
        cur.execute("ANALYZE jobs_job")
        cur.execute("ANALYZE runs_run")
        cur.execute("ANALYZE jobs_schedulespan")
    seconds = []
    report = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = audit()
        seconds.append(time.perf_counter() - t0)
        assert report.ok, report.render()
    assert report is not None
    return {
        "audit_seconds": round(statistics.median(seconds), 2),
        "runs": [round(s, 2) for s in seconds],
        "slots": report.counts["slots"],
        "audited_runs": report.counts["runs"],
    }


# -- create: the public API under gunicorn ----------------------------------------

# A public address literal: the outbound-address rule judges it fully (no
# private targets allowed in this scenario) without a DNS lookup. Nothing
# connects to it: no dispatcher runs, and the jobs' first fires are an hour away.
CREATE_URL = "https://93.184.215.14/hook"
CREATE_JOB = {"interval_seconds": 3600, "url": CREATE_URL, "payload": {"bench": True}}


def _start_gunicorn(tmp: Path, workers: int, threads: int) -> tuple[subprocess.Popen, str]:
    """``_start_web`` for the create and login scenarios: no private targets,
    and the per-owner rate limit lifted (it would cap one owner's creates at
    100 requests/s per process, and create measures the work behind it)."""
    env = {
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1",
        "PUNCTUAL_ALLOW_PRIVATE_TARGETS": "false",
        "PUNCTUAL_API_RATE": "10000000/min",
    }
    proc, port = _start_web(tmp, workers=workers, threads=threads, env=env)
    return proc, f"http://127.0.0.1:{port}"


def _tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of gunicorn: its master and its worker processes."""
    return _cpu_seconds(pid) + _children_cpu_seconds(pid)


def _postgres_cpu_seconds() -> float | None:
    """CPU seconds of the whole PostgreSQL server so far: the postmaster, its
    live backends, and the backends that have exited (the kernel adds those
    to the postmaster's ``cutime``/``cstime``). None when the server is not
    on this host (its ``postmaster.pid`` is not readable here)."""
    with connection.cursor() as cur:
        cur.execute("SHOW data_directory")
        data_directory = cur.fetchone()[0]
    try:
        pid = int(Path(data_directory, "postmaster.pid").read_text().split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    reaped = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
    return _cpu_seconds(pid) + reaped + _children_cpu_seconds(pid)


def _post_jobs(session, base: str, body) -> list | dict:
    answer = session.post(f"{base}/api/v1/jobs/", data=json.dumps(body), timeout=120)
    if answer.status_code != 201:
        raise BenchFailed(f"create answered {answer.status_code}: {answer.text[:500]}")
    return answer.json()


def _single_creates(base: str, token: str, names: list[str]) -> float:
    """Create one job per name, one request each, in order; seconds taken."""
    import requests

    with requests.Session() as session:
        session.headers.update(
            {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        )
        _post_jobs(session, base, {**CREATE_JOB, "name": f"{names[0]}-warm"})  # connection up
        t0 = time.perf_counter()
        for name in names:
            _post_jobs(session, base, {**CREATE_JOB, "name": name})
        return time.perf_counter() - t0


def _parallel_single_creates(base: str, token: str, prefix: str, clients: int, each: int) -> float:
    """``clients`` threads, each with its own connection, ``each`` creates each;
    seconds from the first request to the last answer."""
    import threading

    start = threading.Barrier(clients + 1)
    spans: list[tuple[float, float]] = []
    failures: list[BaseException] = []

    def client(k: int) -> None:
        import requests

        try:
            with requests.Session() as session:
                session.headers.update(
                    {"Authorization": f"Token {token}", "Content-Type": "application/json"}
                )
                _post_jobs(session, base, {**CREATE_JOB, "name": f"{prefix}-{k}-warm"})
                start.wait(timeout=120)
                t0 = time.perf_counter()
                for i in range(each):
                    _post_jobs(session, base, {**CREATE_JOB, "name": f"{prefix}-{k}-{i}"})
                spans.append((t0, time.perf_counter()))
        except BaseException as exc:  # reported below, after every thread ended
            failures.append(exc)
            start.abort()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    try:
        start.wait(timeout=120)
    except threading.BrokenBarrierError:
        pass
    for thread in threads:
        thread.join()
    if failures:
        raise BenchFailed(f"a client failed: {failures[0]!r}")
    return max(t1 for _, t1 in spans) - min(t0 for t0, _ in spans)


def _bulk_creates(base: str, token: str, prefix: str, batches: int, size: int) -> float:
    import requests

    with requests.Session() as session:
        session.headers.update(
            {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        )
        _post_jobs(session, base, [{**CREATE_JOB, "name": f"{prefix}-warm"}])
        t0 = time.perf_counter()
        for b in range(batches):
            body = [{**CREATE_JOB, "name": f"{prefix}-{b}-{i}"} for i in range(size)]
            created = _post_jobs(session, base, body)
            if [job["name"] for job in created] != [job["name"] for job in body]:
                raise BenchFailed("a bulk create did not answer its jobs in input order")
            if any(not job["secret"].startswith(crypto.SECRET_PREFIX) for job in created):
                raise BenchFailed("a bulk create did not answer every secret")
        return time.perf_counter() - t0


# Every bench job has its open schedule span and its "created" event.
CREATE_CHECK = """
    SELECT count(*),
           count(*) FILTER (WHERE NOT EXISTS (
               SELECT 1 FROM jobs_schedulespan AS s WHERE s.job_id = j.id AND s.ended_at IS NULL)),
           count(*) FILTER (WHERE NOT EXISTS (
               SELECT 1 FROM jobs_jobevent AS e WHERE e.job_id = j.id AND e.action = 'created'))
    FROM jobs_job AS j WHERE j.owner_id = %s
"""


def scenario_create(
    *, singles: int, clients: int, batches: int, batch_size: int, repeat: int, force: bool
) -> dict:
    from accounts import tokens

    owner = bench_owner()
    one, many, bulk = [], [], []
    # gunicorn's CPU time per job created (the warm-up requests included):
    # less sensitive than the rates to other load on the machine.
    cpu_ms: dict[str, list[float]] = {"single": [], "bulk": []}
    # PostgreSQL's CPU time per single create (None when the server is elsewhere).
    postgres_ms: list[float] = []
    expected = 0
    with tempfile.TemporaryDirectory(prefix="punctual-bench-") as tmp_name:
        reset(force)
        # The bench owner is inactive between runs: it only exists to own bench jobs.
        get_user_model().objects.filter(pk=owner.pk).update(is_active=True)
        _, token = tokens.issue(owner)  # retires one left by an interrupted run
        gunicorn, base = _start_gunicorn(Path(tmp_name), workers=2, threads=4)
        try:
            each = max(1, singles // clients)
            for r in range(repeat):
                cpu, postgres = _tree_cpu_seconds(gunicorn.pid), _postgres_cpu_seconds()
                seconds = _single_creates(base, token, [f"one-{r}-{i}" for i in range(singles)])
                one.append(singles / seconds)
                cpu_ms["single"].append(1000 * (_tree_cpu_seconds(gunicorn.pid) - cpu) / singles)
                if postgres is not None:
                    used = (_postgres_cpu_seconds() or postgres) - postgres
                    postgres_ms.append(1000 * used / singles)
                seconds = _parallel_single_creates(base, token, f"many-{r}", clients, each)
                many.append(clients * each / seconds)
                cpu = _tree_cpu_seconds(gunicorn.pid)
                seconds = _bulk_creates(base, token, f"bulk-{r}", batches, batch_size)
                bulk.append(batches * batch_size / seconds)
                jobs_made = batches * batch_size
                cpu_ms["bulk"].append(1000 * (_tree_cpu_seconds(gunicorn.pid) - cpu) / jobs_made)
                # The warm-up requests create a job each too.
                expected += singles + 1 + clients * (each + 1) + batches * batch_size + 1
        finally:
            _stop(gunicorn)
            tokens.revoke(owner)
            get_user_model().objects.filter(pk=owner.pk).update(is_active=False)
    with connection.cursor() as cur:
        cur.execute(CREATE_CHECK, [owner.pk])
        jobs, without_span, without_event = cur.fetchone()
    if (jobs, without_span, without_event) != (expected, 0, 0):
        raise BenchFailed(
            f"expected {expected} jobs, each with a span and an event; found {jobs} jobs,"
            f" {without_span} without a span, {without_event} without an event"
        )
    reset(force)
    return {
        "single_jobs_per_s_one_client": median_of(one),
        "single_ms_per_request_one_client": round(1000 / statistics.median(one), 2),
        f"single_jobs_per_s_{clients}_clients": median_of(many),
        "bulk_jobs_per_s": median_of(bulk),
        "bulk_ms_per_request": round(1000 * batch_size / statistics.median(bulk), 1),
        "gunicorn_cpu_ms_per_job": {k: round(statistics.median(v), 3) for k, v in cpu_ms.items()},
        "postgres_cpu_ms_per_single_create": (
            round(statistics.median(postgres_ms), 3) if postgres_ms else None
        ),
        "jobs_created": jobs,
        "runs": {
            "one_client": [round(x) for x in one],
            f"{clients}_clients": [round(x) for x in many],
            "bulk": [round(x) for x in bulk],
        },
    }


# -- login -----------------------------------------------------------------------

LOGIN_USER = "punctual-bench-login"
# Health is probed this often, in both phases.
PROBE_EVERY = 0.05
# How long the hammering may take to reach its first lockout (every
# failure before it is hashed with the production hasher).
LOCKOUT_WITHIN = 120.0


def _forget_login_failures() -> None:
    """The sign-in failures the scenario leaves (or an interrupted run left):
    by its user name, and by the loopback address its clients post from."""
    from axes.models import AccessAttempt
    from django.db.models import Q

    AccessAttempt.objects.filter(Q(username=LOGIN_USER) | Q(ip_address="127.0.0.1")).delete()


BUSY = 0  # the key of the gate's answers among the statuses


def _hammer_login(base: str, stop, answers: dict[int, int], lock, failures: list) -> None:
    """One anonymous client: the sign-in form once, for its CSRF cookie, then
    wrong passwords for the bench's user until ``stop``; answers by status."""
    import requests

    url = f"{base}/admin/login/"
    try:
        with requests.Session() as session:
            session.get(url, timeout=120)
            form = {"username": LOGIN_USER, "csrfmiddlewaretoken": session.cookies["csrftoken"]}
            n = 0
            while not stop.is_set():
                n += 1
                answer = session.post(url, data={**form, "password": f"wrong-{n}"}, timeout=120)
                # 429 with Retry-After: 1 is the one-sign-in-at-a-time gate
                # (another post was being checked), not a lockout.
                busy = answer.status_code == 429 and answer.headers.get("Retry-After") == "1"
                key = BUSY if busy else answer.status_code
                with lock:
                    answers[key] = answers.get(key, 0) + 1
    except BaseException as exc:  # reported by the scenario, after every thread ended
        failures.append(exc)
        stop.set()


def _login_clients(base: str, clients: int, stop, locked, conn) -> None:
    """The sign-in clients' own process: ``clients`` threads of _hammer_login
    until ``stop``; ``locked`` is set once a lockout was answered, and the
    answers and failures go back over ``conn`` at the end.

    Apart from the bench's process, so that the health probes do not share a
    GIL (and a core's time slices) with eight busy client threads: what they
    measure is then the server's answer, not the bench's own queue."""
    import threading

    answers: dict[int, int] = {}
    failures: list[BaseException] = []
    lock, done = threading.Lock(), threading.Event()
    threads = [
        threading.Thread(target=_hammer_login, args=(base, done, answers, lock, failures))
        for _ in range(clients)
    ]
    for thread in threads:
        thread.start()
    while not stop.is_set() and not done.is_set():
        if 429 in answers:
            locked.set()
        stop.wait(0.05)
    done.set()
    for thread in threads:
        thread.join()
    conn.send((answers, [repr(f) for f in failures]))
    conn.close()


def _health_latencies(url: str, seconds: float, until=lambda: True) -> list[float]:
    """Probe ``url`` every PROBE_EVERY for ``seconds``, and on until ``until()``
    holds (at most LOCKOUT_WITHIN more); milliseconds per probe."""
    latencies: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end or not until():
        if time.monotonic() > end + LOCKOUT_WITHIN:
            raise BenchFailed(f"no sign-in was locked out within {LOCKOUT_WITHIN:.0f} s")
        latencies.append(_probe_ms(url))
        time.sleep(PROBE_EVERY)
    return latencies


def _latency_figures(values: list[float]) -> dict:
    return {
        "p50": round(_percentile(values, 0.50), 1),
        "p99": round(_percentile(values, 0.99), 1),
        "max": round(max(values, default=0.0), 1),
        "probes": len(values),
    }


def scenario_login(*, clients: int, duration: float, force: bool) -> dict:
    """Health latency while ``clients`` anonymous threads post wrong passwords
    to the admin's sign-in form, against gunicorn as the Procfile runs it
    (production password hashing): first ``duration`` seconds without them,
    then ``duration`` seconds with them.

    Every failure up to the limit is hashed; after it the user name (and the
    address) is locked out, and the refusals cost no hash. The scenario checks
    that lockouts happened and that no more passwords were checked than the
    limit lets through (plus one in flight per thread)."""
    import multiprocessing

    user, _ = get_user_model().objects.get_or_create(
        username=LOGIN_USER, defaults={"is_active": False}
    )
    user.set_password(crypto.generate_secret())
    user.save(update_fields=["password"])
    _forget_login_failures()
    answers: dict[int, int] = {}
    failures: list[str] = []
    fork = multiprocessing.get_context("fork")
    stop, locked = fork.Event(), fork.Event()
    receive, send = fork.Pipe(duplex=False)
    with tempfile.TemporaryDirectory(prefix="punctual-bench-") as tmp_name:
        gunicorn, base = _start_gunicorn(Path(tmp_name), workers=2, threads=4)
        health = f"{base}/api/v1/health/"
        # The child gets no copy of an open database connection.
        connection.close()
        login = fork.Process(target=_login_clients, args=(base, clients, stop, locked, send))
        try:
            cpu = _tree_cpu_seconds(gunicorn.pid)
            idle = _health_latencies(health, duration)
            idle_cpu = _tree_cpu_seconds(gunicorn.pid) - cpu
            login.start()
            t0, cpu = time.monotonic(), _tree_cpu_seconds(gunicorn.pid)
            loaded = _health_latencies(
                health, duration, until=lambda: locked.is_set() or not login.is_alive()
            )
            loaded_cpu = _tree_cpu_seconds(gunicorn.pid) - cpu
            elapsed = time.monotonic() - t0
        finally:
            stop.set()
            if login.pid is not None:
                if receive.poll(120):
                    answers, failures = receive.recv()
                login.join(timeout=60)
            _stop(gunicorn)
            _forget_login_failures()
            user.delete()
    if failures:
        raise BenchFailed(f"a sign-in client failed: {failures[0]}")
    # A wrong password checked and answered with the form again: each one hashed.
    checked = answers.get(200, 0)
    limit = settings.AXES_FAILURE_LIMIT
    if checked > limit + clients:
        raise BenchFailed(f"{checked} wrong passwords were checked; the limit is {limit}")
    if not answers.get(429):
        raise BenchFailed(f"no sign-in was locked out: {answers}")
    unexpected = set(answers) - {200, 429, BUSY}
    if unexpected:
        raise BenchFailed(f"sign-in answered {sorted(unexpected)}: {answers}")
    posts = sum(answers.values())
    return {
        "failure_limit": limit,
        "health_ms_idle": _latency_figures(idle),
        "health_ms_under_login_load": _latency_figures(loaded),
        "login_posts": posts,
        "login_posts_per_s": round(posts / elapsed, 1),
        "answers": {str(status): n for status, n in sorted(answers.items()) if status != BUSY},
        "answered_with_the_form": checked,
        "locked_out": answers.get(429, 0),
        "busy": answers.get(BUSY, 0),
        "gunicorn_cpu_s": {"idle": round(idle_cpu, 2), "under_login_load": round(loaded_cpu, 2)},
    }


# -- history -------------------------------------------------------------------

HISTORY_DAYS = 30
HISTORY_JOBS = 1000
HISTORY_ADMIN = "punctual-bench-admin"
HOT_PATH_JOBS = "bench-hot-"

# One day of finished history into its day partition, by generate_series:
# the runs of HISTORY_JOBS jobs spread evenly over the day, mostly succeeded,
# with the few failed, missed, skipped and cancelled runs, late runs and
# non-scheduled kinds that the admin's filters look for. The ids are drawn at
# random, not hashed from the fire (runs/identity.py): PostgreSQL cannot make
# uuid5s, and hashing 50 million in Python would take longer than the rest of
# the bench; to the indexes a random uuid and a uuid5 look alike.
HISTORY_RUNS = """
    INSERT INTO {part} (
        id, job_id, scheduled_at, kind, state, reason, attempt, max_attempts,
        available_at, lease_owner, created_at, started_at, finished_at, lag_seconds,
        last_status_code, last_error, target_kind, exclusive, owner_id)
    SELECT gen_random_uuid(), (%(jobs)s::uuid[])[1 + g %% %(njobs)s], at, k.kind, s.state,
           CASE s.state WHEN 'missed' THEN 'past grace' WHEN 'skipped' THEN 'overlap'
                        WHEN 'cancelled' THEN 'paused' ELSE '' END,
           1, 3, NULL, '', at, at, at + interval '80 milliseconds',
           CASE WHEN g %% 97 = 0 THEN 12.5 ELSE 0.05 END,
           CASE s.state WHEN 'succeeded' THEN 200 WHEN 'failed' THEN 503 END,
           CASE s.state WHEN 'failed' THEN 'HTTP 503' ELSE '' END, 'webhook', true, %(owner)s
    FROM generate_series(0, %(n)s - 1) AS g,
         LATERAL (SELECT %(day)s::timestamptz + g * %(step)s::float8 * interval '1 microsecond'
                  AS at) AS t,
         LATERAL (SELECT CASE WHEN g %% 50 = 1 THEN 'failed' WHEN g %% 100 = 2 THEN 'missed'
                              WHEN g %% 100 = 3 THEN 'skipped' WHEN g %% 200 = 4 THEN 'cancelled'
                              ELSE 'succeeded' END AS state) AS s,
         LATERAL (SELECT CASE WHEN g %% 200 = 5 THEN 'backfill' WHEN g %% 200 = 6 THEN 'manual'
                              WHEN g %% 100 = 7 THEN 'catch_up' ELSE 'scheduled' END AS kind) AS k
"""
# Its attempts: one per run that started one (missed and skipped runs did not).
HISTORY_ATTEMPTS = """
    INSERT INTO {attempts} (run_id, scheduled_at, number, worker, started_at, finished_at,
                            outcome, status_code, duration_ms, error)
    SELECT id, scheduled_at, 1, 'bench-worker', started_at, finished_at,
           CASE state WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'failed'
                      ELSE 'interrupted' END,
           last_status_code, 80, last_error
    FROM {runs} WHERE state NOT IN ('missed', 'skipped')
"""


def fill_history(total: int, days: int = HISTORY_DAYS) -> dict:
    """``total`` finished runs over the ``days`` days before today, with their
    attempts. Each day is written into a table of its own and attached as
    that day's partition afterwards: building the indexes once over a
    loaded table is several times faster than growing them row by row."""
    from runs import partitions

    # Not due: they only own the history.
    insert_jobs(HISTORY_JOBS, interval=60, name="bench-history-")
    with connection.cursor() as cur:
        cur.execute("SELECT id FROM jobs_job WHERE owner_id = %s ORDER BY id", [bench_owner().pk])
        jobs = [row[0] for row in cur.fetchall()]
    today = db_now().date()
    first = today - dt.timedelta(days=days)
    # Empty days of an earlier run go: each day is made anew below.
    partitions.drop_expired_days(dt.datetime.combine(today, dt.time(), tzinfo=dt.UTC))
    partitions.ensure_partitions(today)
    per_day = total // days
    t0 = time.perf_counter()
    for n in range(days):
        day = first + dt.timedelta(days=n)
        count = per_day + (total - per_day * days if n == days - 1 else 0)
        lo = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
        hi = lo + dt.timedelta(days=1)
        runs = partitions.partition_name("runs_run", day)
        attempts = partitions.partition_name("runs_attempt", day)
        with transaction.atomic(), connection.cursor() as cur:
            for parent, part in (("runs_run", runs), ("runs_attempt", attempts)):
                cur.execute(
                    f"CREATE TABLE {part} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
                )
            cur.execute(
                HISTORY_RUNS.format(part=runs),
                {
                    "jobs": jobs,
                    "njobs": len(jobs),
                    "owner": bench_owner().pk,
                    "n": count,
                    "day": lo,
                    "step": 86_400_000_000 // max(count, 1),
                },
            )
            cur.execute(HISTORY_ATTEMPTS.format(attempts=attempts, runs=runs))
            for parent, part in (("runs_run", runs), ("runs_attempt", attempts)):
                # The CHECK spares ATTACH a scan of the rows; ATTACH builds
                # the partition's indexes.
                cur.execute(
                    f"ALTER TABLE {part} ADD CONSTRAINT {part}_bounds"
                    " CHECK (scheduled_at >= %(lo)s AND scheduled_at < %(hi)s)",
                    {"lo": lo, "hi": hi},
                )
                cur.execute(
                    f"ALTER TABLE {parent} ATTACH PARTITION {part}"
                    " FOR VALUES FROM (%(lo)s) TO (%(hi)s)",
                    {"lo": lo, "hi": hi},
                )
                cur.execute(f"ALTER TABLE {part} DROP CONSTRAINT {part}_bounds")
    fill_s = time.perf_counter() - t0
    with connection.cursor() as cur:
        cur.execute("VACUUM (ANALYZE) runs_run")
        cur.execute("VACUUM (ANALYZE) runs_attempt")
        cur.execute("ANALYZE jobs_job")
    return {
        "runs": total,
        "days": days,
        "fill_s": round(fill_s, 1),
        "vacuum_analyze_s": round(time.perf_counter() - t0 - fill_s, 1),
    }


def hot_path(due: int, batch: int, claim_batch: int = 200) -> dict:
    """One round of the hot statements on ``due`` fresh due jobs: the
    dispatcher's inserts, then the claims and the completions (as the worker
    writes them, with their scheduled_at), in rows per second each."""
    from runs import leases, outcomes

    insert_jobs(due, interval=3600, due=due, name=HOT_PATH_JOBS)
    r = drain(batch)
    if r["runs"] != due:
        raise AssertionError(f"expected {due} fires, made {r['runs']}")
    dispatch = due / (r["t1"] - r["t0"])
    # As autovacuum would soon: without it, the planner takes a partition
    # emptied by the previous round for empty still, and the claims pay for
    # that rather than for the history (not timed).
    with connection.cursor() as cur:
        cur.execute("ANALYZE runs_run")

    claimed = []
    t0 = time.perf_counter()
    while True:
        got = leases.claim("bench-worker", limit=claim_batch, lease_seconds=300)
        if not got:
            break
        claimed += got
    claim_s = time.perf_counter() - t0
    if len(claimed) != due:
        raise AssertionError(f"claimed {len(claimed)} runs of {due}")

    t0 = time.perf_counter()
    for start in range(0, len(claimed), claim_batch):
        batch_results = [
            outcomes.Result(
                run_id=c.run_id,
                job_id=c.job_id,
                attempt=c.attempt,
                state="succeeded",
                status_code=200,
                duration_ms=5,
                scheduled_at=c.scheduled_at,
            )
            for c in claimed[start : start + claim_batch]
        ]
        done = outcomes.complete("bench-worker", batch_results)
        if done.stale:
            raise AssertionError(f"{len(done.stale)} completions were stale")
    complete_s = time.perf_counter() - t0
    return {
        "dispatch": dispatch,
        "claim": due / claim_s,
        "complete": due / complete_s,
    }


def forget_hot_path_jobs() -> None:
    """Remove the jobs (and runs) ``hot_path`` made, keeping the history."""
    owner = bench_owner().pk
    with connection.cursor() as cur:
        cur.execute(
            "SELECT array_agg(id) FROM jobs_job WHERE owner_id = %s AND name LIKE %s",
            [owner, HOT_PATH_JOBS + "%"],
        )
        ids = cur.fetchone()[0] or []
        since = db_now() - dt.timedelta(days=1)  # they fired just now: recent partitions only
        cur.execute(
            "DELETE FROM runs_attempt WHERE scheduled_at >= %s"
            " AND run_id IN (SELECT id FROM runs_run WHERE scheduled_at >= %s"
            " AND job_id = ANY(%s::uuid[]))",
            [since, since, ids],
        )
        cur.execute(
            "DELETE FROM runs_run WHERE scheduled_at >= %s AND job_id = ANY(%s::uuid[])",
            [since, ids],
        )
        for table in ("jobs_jobevent", "jobs_schedulespan"):
            cur.execute(f"DELETE FROM {table} WHERE job_id = ANY(%s::uuid[])", [ids])
        cur.execute("DELETE FROM jobs_job WHERE id = ANY(%s::uuid[])", [ids])


def admin_pages(repeat: int) -> dict:
    """Milliseconds (median of ``repeat``, after one warm-up) for the runs list,
    its usual filters and one run's page, through Django's test client as a
    superuser: the whole request, template rendering included."""
    from django.test import Client

    from runs.models import Run

    user, _ = get_user_model().objects.get_or_create(
        username=HISTORY_ADMIN, defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    some_run = Run.objects.filter(state="failed").order_by("-scheduled_at").first()
    pages = {
        "list": "/admin/runs/run/",
        "list_failed": "/admin/runs/run/?status=failed",
        "list_late": "/admin/runs/run/?status=late",
        "list_running": "/admin/runs/run/?status=running",
        "list_backfill": "/admin/runs/run/?kind=backfill",
    }
    if some_run is not None:  # an empty table has no third page, no run to open
        pages["list_page_3"] = "/admin/runs/run/?p=3"
        pages["change"] = f"/admin/runs/run/{some_run.pk}/change/"
    figures = {}
    for name, url in pages.items():
        times = []
        for k in range(repeat + 1):
            t0 = time.perf_counter()
            response = client.get(url)
            elapsed = (time.perf_counter() - t0) * 1000
            if response.status_code != 200:
                raise AssertionError(f"{url} answered {response.status_code}")
            if k:
                times.append(elapsed)
        figures[name] = round(statistics.median(times), 1)
    return figures


def scenario_history(*, runs: int, due: int, batch: int, repeat: int, force: bool) -> dict:
    """The hot path and the admin on an empty runs table, then again over
    ``runs`` finished runs of history spread over the past 30 days (one
    partition a day): the ratio says what the history costs. "Empty" has
    only the partitions of today and the coming days."""
    from runs import partitions

    reset(force)
    partitions.drop_expired_days(dt.datetime.combine(db_now().date(), dt.time(), tzinfo=dt.UTC))
    empty = []
    for _ in range(repeat):
        empty.append(hot_path(due, batch))
        forget_hot_path_jobs()
    admin_empty = admin_pages(repeat)

    reset(force)
    fill = fill_history(runs)
    full = []
    for _ in range(repeat):
        full.append(hot_path(due, batch))
        forget_hot_path_jobs()
    admin_full = admin_pages(repeat)

    def rates(rounds: list[dict]) -> dict:
        return {key: median_of([r[key] for r in rounds]) for key in rounds[0]}

    on_empty, on_history = rates(empty), rates(full)
    return {
        "history": fill,
        "rows_per_s_empty": on_empty,
        "rows_per_s_history": on_history,
        "ratio_history_to_empty": {
            key: round(on_history[key] / on_empty[key], 3) if on_empty[key] else None
            for key in on_empty
        },
        "admin_ms_empty": admin_empty,
        "admin_ms_history": admin_full,
    }
