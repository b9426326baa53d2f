"""Smoke runs of ``manage.py bench``: the JSON shape and the invariants, not speed.

The figures themselves come from full runs on a quiet machine (docs/benchmarks.md). The
checks use ``expect``, not ``assert``: ``python -O`` strips assert statements,
and these invariants (no duplicate, nothing lost) must hold however the
suite is run."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from ops.bench.machine import cpu_model
from ops.bench.processes import postgres_cpu_seconds
from tests import plans, pooler
from tests.factories import make_job
from tests.processes.conftest import ROOT, process_env

pytestmark = [pytest.mark.django_db(transaction=True)]


def expect(condition: object, message: str = "") -> None:
    """An assertion that ``python -O`` keeps."""
    if not condition:
        raise AssertionError(message)


def run_bench(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """``manage.py bench`` with ``args``, in the test environment plus ``env``."""
    return subprocess.run(
        [sys.executable, "manage.py", "bench", *args],
        cwd=ROOT,
        env=process_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def bench(*args: str) -> list[dict]:
    out = run_bench(*args)
    expect(out.returncode == 0, out.stderr[-2000:])
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_dispatch_scenario_reports_both_rates_and_makes_every_fire_once():
    [result] = bench("dispatch", "--jobs", "3000", "--due", "2000", "--repeat", "1")
    expect(result["scenario"] == "dispatch")
    expect(result["params"]["due"] == 2000)
    expect(result["fires_per_s_one_dispatcher"] > 0)
    expect(result["fires_per_s_two_dispatchers"] > 0)
    expect({"cores", "python", "postgresql"} <= set(result["machine"]))


def test_recovery_scenario_records_100_missed_rows_and_counts_the_rest():
    """The scenario asserts its own invariants (100 missed rows per job, every
    other fire counted on the job and its span); here: that it ran them."""
    [result] = bench("recovery", "--jobs", "20", "--repeat", "1")
    expect(result["scenario"] == "recovery")
    expect(result["ticks"][0] >= 1 and result["locked_s_total"] > 0)
    # 24 h of minutes, both ends included: 1,441 fires; 101 rows (100 missed,
    # one on time); 1,340 counted. A tick that crosses a minute adds a fire
    # within the grace, held back by the one before it: a missed row ("no
    # dispatcher"), which takes the place of the oldest recorded misfire
    # under the cap of 100, and that one is counted.
    for fires, rows, counted in result["fires_rows_counted"]:
        expect((fires - 1441, rows - 101, counted) in ((0, 0, 1340), (1, 0, 1341)))


@pytest.mark.parametrize("receiver", ["aiohttp", "plain"])
def test_e2e_scenario_has_no_duplicate_or_lost_fires(receiver):
    [result] = bench("e2e", "--jobs", "50", "--duration", "4", "--receiver", receiver)
    expect(result["params"]["receiver"] == receiver and result["params"]["web"], result)
    expect(result["duplicate_fires"] == 0, result)
    expect(result["lost_fires"] == 0, result)
    # 50 jobs, one fire a second each, for 4 s: every fire accounted for (a run,
    # or a parked job's skipped run counting it).
    expect(sum(result["fires_by_state"].values()) == 200, result)
    expect(result["fires_by_state"].get("succeeded", 0) > 0, result)
    expect(result["deliveries_per_s"] > 0, result)
    # The window's deliveries by 5 s: one bucket for 4 s, the same deliveries
    # (each rate rounded to 0.1/s).
    [bucket] = result["delivered_in_window_by_5s_per_s"]
    expect(abs(bucket * 5 - result["delivered_in_window_per_s"] * 4) <= 0.5, result)
    expect(set(result["lag_seconds"]) == {"p50", "p95", "p99"}, result)
    processes = {"receiver", "dispatcher", "worker0", "web"}
    if postgres_cpu_seconds() is not None:  # the server is on this host
        processes.add("postgres")
        expect(result["cpu_seconds"]["postgres"] > 0, result)
    expect(set(result["cpu_seconds"]) == processes, result)
    expect(result["health_ms"]["p50"] > 0, result)
    # Where the figures hold: the session's server, whether it has JIT, the CPU.
    server = plans.server()
    expect(result["machine"]["postgresql"].split()[0].split(".")[0] == str(server["major"]), result)
    expect(result["machine"]["jit_available"] == server["jit_available"], result)
    expect(result["machine"]["cpu_model"] not in ("", "unknown"), result)


def test_e2e_overload_scenario_runs_twice_the_load_and_loses_nothing():
    """Tiny loads: the shape, and that both runs account for every fire."""
    [result] = bench("overload", "--jobs", "20", "--duration", "3", "--workers", "1")
    for run, jobs in ((result["at_peak"], 20), (result["at_twice"], 40)):
        expect(run["duplicate_fires"] == 0 and run["lost_fires"] == 0, result)
        expect(sum(run["fires_by_state"].values()) == jobs * 3, result)
    # Every job has fires of the window delivered, in the window or in the
    # drain after it, so that ratio is a number. The other counts deliveries
    # started within the 3 s only: on a loaded machine the first run's can all
    # start after them (seen in CI beside the tiers lane), and then there is
    # no ratio (None), not a division by zero.
    expect(result["twice_over_peak_window_fires"] > 0, result)
    in_window = result["at_peak"]["delivered_in_window_per_s"]
    expect((result["twice_over_peak"] is None) == (in_window == 0), result)
    expect(result["twice_over_peak"] is None or result["twice_over_peak"] >= 0, result)


def test_e2e_bench_prints_where_its_figures_hold():
    out = run_bench("e2e", "--jobs", "5", "--duration", "1")
    expect(out.returncode == 0, out.stderr[-2000:])
    server = plans.server()
    line = next(line for line in out.stderr.splitlines() if line.startswith("bench on "))
    expect(f"PostgreSQL {server['major']}" in line, line)
    expect(("JIT available" if server["jit_available"] else "no JIT") in line, line)
    expect(cpu_model() in line, line)


def test_slow_scenario_holds_every_delivery_in_flight_at_once():
    # Each delivery is held 20 s, so both workers' start-ups and all 200
    # starts fit inside one delivery however busy the machine (with 2 s, a
    # worker that started late found its peers' share already answered).
    [result] = bench("slow", "--inflight", "200", "--delay", "20", "--workers", "2")
    expect(result["max_in_flight"] == 200)
    expect(result["succeeded"] == 200)
    expect(len(result["worker_rss_mb"]) == 2)


def test_create_scenario_reports_single_and_bulk_rates_through_gunicorn():
    """Tiny counts: the shape, and that every job the API made was counted
    with its span and event (the scenario raises otherwise, and exits 1)."""
    [result] = bench(
        "create",
        "--singles",
        "8",
        "--clients",
        "2",
        "--batches",
        "2",
        "--bulk-size",
        "50",
        "--repeat",
        "1",
    )
    if result["scenario"] != "create":
        pytest.fail(f"unexpected scenario {result['scenario']!r}")
    rates = (
        result["single_jobs_per_s_one_client"],
        result["single_jobs_per_s_2_clients"],
        result["bulk_jobs_per_s"],
    )
    if not all(isinstance(rate, float) and rate > 0 for rate in rates):
        pytest.fail(f"rates missing or not positive: {rates}")
    # 8 + 1 warm-up; 2 clients x (4 + 1 warm-up); 2 x 50 + 1 warm-up.
    if result["jobs_created"] != 9 + 10 + 101:
        pytest.fail(f"jobs_created {result['jobs_created']}, expected 120")
    if set(result["gunicorn_cpu_ms_per_job"]) != {"single", "bulk"}:
        pytest.fail(f"unexpected CPU figures {result['gunicorn_cpu_ms_per_job']}")
    # Measured when the server is on this host; 8 creates may take less
    # than one clock tick of its CPU, so 0.0 is a measurement too.
    postgres = result["postgres_cpu_ms_per_single_create"]
    if postgres_cpu_seconds() is not None and not (isinstance(postgres, float) and postgres >= 0):
        pytest.fail(f"PostgreSQL's CPU per single create missing: {postgres!r}")
    if not {"cores", "python", "postgresql"} <= set(result["machine"]):
        pytest.fail(f"machine figures missing: {result['machine']}")


def test_bench_refuses_a_database_with_foreign_jobs(owner):
    make_job(owner)
    out = run_bench("dispatch", "--repeat", "1", timeout=60)
    expect(out.returncode != 0)
    expect("did not make" in out.stderr)


def test_idle_scenario_refuses_a_fleet_the_server_has_no_connections_for():
    """Two connections a worker: a fleet larger than the server's
    max_connections is refused at once, naming the setting, rather than
    left to fail to connect while the bench waits out its timeouts."""
    out = run_bench("idle", "--workers", "10000", timeout=60)
    expect(out.returncode != 0)
    expect("raise max_connections" in out.stderr)
    expect("10000 idle workers need 20000 connections" in out.stderr)


@pytest.mark.pooler
@pytest.mark.parametrize("listen", ["true", "false"])
def test_idle_scenario_counts_the_database_and_times_every_wake_up(listen):
    # PostgreSQL publishes an idle backend's transaction counts within 10 s
    # (at most once a second otherwise). Directly, the bench's own backend
    # publishes its reads each second; through a pooler its statements and
    # the workers' are spread over server connections, so only a window past
    # those 10 s is sure to count any.
    window = "11" if pooler.serving() else "1"
    out = run_bench(
        "idle",
        *("--workers", "2", "--window", window, "--wakeups", "3"),
        PUNCTUAL_LISTEN=listen,
        PUNCTUAL_LOG_LEVEL="WARNING",
    )
    expect(out.returncode == 0, out.stderr[-2000:])
    [result] = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    expect(result["scenario"] == "idle")
    expect(result["params"] == {"workers": 2, "window": float(window), "wakeups": 3})
    expect(result["listen"] is (listen == "true"))
    expect(result["transactions_per_s"] > 0)
    expect(result["transactions_per_s_per_worker"] > 0)
    expect(set(result["wakeup_ms"]) == {"p50", "p95", "max"})
    expect(result["wakeups"] == 3)
    expect({"statements_per_s", "claims_begun_before_commit"} <= set(result))


def test_history_scenario_compares_the_hot_path_and_the_admin_with_and_without_history():
    """A tiny history (the figures are meaningless at this size): the JSON
    shape, every rate measured on both tables, and the admin pages answered."""
    try:
        [result] = bench(
            "history",
            "--history-runs",
            "3000",
            "--due",
            "40",
            "--batch-size",
            "20",
            "--repeat",
            "1",
        )
        hot = {"dispatch", "claim", "complete"}
        expect(result["scenario"] == "history", result["scenario"])
        expect(result["params"]["runs"] == 3000, f"params: {result['params']}")
        expect(result["history"]["runs"] == 3000, f"history: {result['history']}")
        expect(result["history"]["fill_s"] > 0, f"history: {result['history']}")
        for key in ("rows_per_s_empty", "rows_per_s_history", "ratio_history_to_empty"):
            expect(set(result[key]) == hot, f"{key}: {result[key]}")
            expect(all(v and v > 0 for v in result[key].values()), f"{key}: {result[key]}")
        pages = {"list", "list_failed", "list_late", "list_running", "list_backfill"}
        expect(pages <= set(result["admin_ms_empty"]), f"{result['admin_ms_empty']}")
        expect(
            set(result["admin_ms_history"]) == pages | {"list_page_3", "change"},
            f"{result['admin_ms_history']}",
        )
    finally:
        # The bench made a partition for each past day; leave the schema as
        # migrate made it.
        from core.db import db_now
        from runs import partitions

        today = dt.datetime.combine(db_now().date(), dt.time(), tzinfo=dt.UTC)
        partitions.drop_expired_days(today)


def test_login_scenario_measures_health_while_wrong_passwords_get_locked_out():
    """Tiny and short: the JSON shape, and that the sign-in limits locked the
    threads out after at most the limit's worth of checked passwords (the
    scenario raises otherwise)."""
    from axes.models import AccessAttempt
    from django.contrib.auth import get_user_model

    from ops.bench.login import LOGIN_USER

    [result] = bench("login", "--clients", "2", "--duration", "1")
    expect(result["scenario"] == "login", result)
    expect(result["params"] == {"clients": 2, "duration": 1.0}, result)
    expect(result["locked_out"] > 0, result)
    expect(set(result["answers"]) <= {"200", "429"}, result)
    limit = result["failure_limit"]
    expect(result["answered_with_the_form"] <= limit + 2, result)
    expect(sum(result["answers"].values()) + result["busy"] == result["login_posts"], result)
    for phase in ("health_ms_idle", "health_ms_under_login_load"):
        figures = result[phase]
        expect(set(figures) == {"p50", "p99", "max", "probes"}, figures)
        expect(figures["probes"] > 0 and figures["p50"] > 0, figures)
    expect(set(result["gunicorn_cpu_s"]) == {"idle", "under_login_load"}, result)
    # It leaves neither its user nor its failures behind.
    expect(not get_user_model().objects.filter(username=LOGIN_USER).exists())
    expect(not AccessAttempt.objects.filter(username=LOGIN_USER).exists())
