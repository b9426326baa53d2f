"""Smoke runs of ``manage.py bench``: the JSON shape and the invariants, not speed.

The figures themselves come from full runs on a quiet machine (README)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from tests.factories import make_job
from tests.processes.conftest import ROOT, process_env

pytestmark = [pytest.mark.django_db(transaction=True)]


def bench(*args: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "manage.py", "bench", *args],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_dispatch_scenario_reports_both_rates_and_makes_every_fire_once():
    [result] = bench("dispatch", "--jobs", "3000", "--due", "2000", "--repeat", "1")
    assert result["scenario"] == "dispatch"
    assert result["params"]["due"] == 2000
    assert result["fires_per_s_one_dispatcher"] > 0
    assert result["fires_per_s_two_dispatchers"] > 0
    assert {"cores", "python", "postgresql"} <= set(result["machine"])


def test_recovery_scenario_records_100_missed_rows_and_counts_the_rest():
    """The scenario asserts its own invariants (100 missed rows per job, every
    other fire counted on the job and its span); here: that it ran them."""
    [result] = bench("recovery", "--jobs", "20", "--repeat", "1")
    assert result["scenario"] == "recovery"
    assert result["ticks"][0] >= 1 and result["locked_s_total"] > 0
    # 24 h of minutes, both ends included: 1,441 fires; 101 rows (100 missed,
    # one on time); 1,340 counted. A tick that crosses a minute adds a row.
    for fires, rows, counted in result["fires_rows_counted"]:
        assert (fires - 1441, rows - 101, counted) in ((0, 0, 1340), (1, 1, 1340))


def test_e2e_scenario_has_no_duplicate_or_lost_fires():
    [result] = bench("e2e", "--jobs", "50", "--duration", "4")
    assert result["duplicate_fires"] == 0
    assert result["lost_fires"] == 0
    assert result["deliveries_per_s"] > 0
    assert set(result["lag_seconds"]) == {"p50", "p95", "p99"}
    assert set(result["cpu_seconds"]) == {"receiver", "dispatcher", "worker0"}


def test_slow_scenario_holds_every_delivery_in_flight_at_once():
    # Each delivery is held 20 s, so both workers' start-ups and all 200
    # starts fit inside one delivery however busy the machine (with 2 s, a
    # worker that started late found its peers' share already answered).
    [result] = bench("slow", "--inflight", "200", "--delay", "20", "--workers", "2")
    assert result["max_in_flight"] == 200
    assert result["succeeded"] == 200
    assert len(result["worker_rss_mb"]) == 2


def test_bench_refuses_a_database_with_foreign_jobs(owner):
    make_job(owner)
    out = subprocess.run(
        [sys.executable, "manage.py", "bench", "dispatch", "--repeat", "1"],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "did not make" in out.stderr


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
        problems = []
        if result["scenario"] != "history" or result["params"]["runs"] != 3000:
            problems.append(f"params: {result['params']}")
        if result["history"]["runs"] != 3000 or result["history"]["fill_s"] <= 0:
            problems.append(f"history: {result['history']}")
        for key in ("rows_per_s_empty", "rows_per_s_history", "ratio_history_to_empty"):
            if set(result[key]) != hot or not all(v and v > 0 for v in result[key].values()):
                problems.append(f"{key}: {result[key]}")
        pages = {"list", "list_failed", "list_late", "list_running", "list_backfill"}
        if not pages <= set(result["admin_ms_empty"]):
            problems.append(f"admin_ms_empty: {result['admin_ms_empty']}")
        if set(result["admin_ms_history"]) != pages | {"list_page_3", "change"}:
            problems.append(f"admin_ms_history: {result['admin_ms_history']}")
        if problems:
            raise AssertionError("; ".join(problems))
    finally:
        # The bench made a partition for each past day; leave the schema as
        # migrate made it.
        from core.db import db_now
        from runs import partitions

        today = dt.datetime.combine(db_now().date(), dt.time(), tzinfo=dt.UTC)
        partitions.drop_expired_days(today)
