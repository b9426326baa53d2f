"""GET /metrics (docs/operating/health.md "Metrics: GET /metrics"): every series, with
values that match the database."""

from __future__ import annotations

import datetime as dt
import http.server
import threading
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.db import db_now
from dispatch import fleet
from dispatch.dispatcher import Dispatcher
from jobs.models import Job
from ops import metrics
from runs import leases, outcomes, stats
from runs.models import Attempt, DeliveryStat, Run
from tests.factories import make_job
from tests.integration.ops.conftest import wait_until

pytestmark = pytest.mark.django_db

STATES = ("pending", "running", "retrying", "succeeded", "failed", "missed", "skipped", "cancelled")


def value(samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def runs_in(state: str) -> int:
    return Run.objects.filter(state=state).count()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # http.server's spelling
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200 if self.path == "/ok" else 500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    """A real HTTP receiver on loopback: /ok answers 200, anything else 500."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def due_now(job: Job) -> None:
    Job.objects.filter(pk=job.pk).update(next_fire_at=db_now() - dt.timedelta(seconds=1))


def test_a_scrape_has_every_required_series(scrape):
    types, samples = scrape()
    assert types["punctual_dispatch_lag_seconds"] == "gauge"
    assert types["punctual_runs"] == "gauge"
    assert types["punctual_oldest_pending_seconds"] == "gauge"
    assert types["punctual_deliveries"] == "counter"
    assert types["punctual_delivery_seconds"] == "histogram"
    assert types["punctual_processes"] == "gauge"
    assert types["punctual_alerts"] == "gauge"
    assert value(samples, "punctual_database_up") == 1
    for state in ("pending", "sending", "sent", "failed"):
        assert value(samples, "punctual_alerts", state=state) == 0
    for state in STATES:
        assert value(samples, "punctual_runs", state=state) == 0
    for outcome in ("succeeded", "failed", "permanent"):
        assert value(samples, "punctual_deliveries_total", outcome=outcome) == 0
        assert value(samples, "punctual_delivery_seconds_count", outcome=outcome) == 0
        assert value(samples, "punctual_delivery_seconds_bucket", outcome=outcome, le="+Inf") == 0
        assert value(samples, "punctual_delivery_seconds_sum", outcome=outcome) == 0
    for kind in ("dispatcher", "worker"):
        assert value(samples, "punctual_processes", kind=kind) == 0
    for kind in ("webhook", "pull"):
        assert value(samples, "punctual_oldest_pending_seconds", target_kind=kind) == 0
    assert value(samples, "punctual_dispatch_lag_seconds") == 0


def test_missed_count_after_a_forced_outage_matches_the_database(scrape, owner):
    jobs = [make_job(owner, interval_seconds=60, misfire_grace_seconds=30) for _ in range(3)]
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(
        next_fire_at=db_now() - dt.timedelta(minutes=10)
    )
    make_job(owner, interval_seconds=3600)  # not due: no runs
    Dispatcher().tick()

    _, samples = scrape()
    assert runs_in("missed") >= 3 * 9
    for state in STATES:
        assert value(samples, "punctual_runs", state=state) == runs_in(state), state
    assert value(samples, "punctual_runs_estimated") == 0


def test_lag_while_no_dispatcher_runs_matches_the_overdue_job(scrape, owner):
    job = make_job(owner)
    Job.objects.filter(pk=job.pk).update(next_fire_at=db_now() - dt.timedelta(seconds=90))
    _, samples = scrape()
    assert 90 <= value(samples, "punctual_dispatch_lag_seconds") < 120
    assert value(samples, "punctual_processes", kind="dispatcher") == 0
    # A dispatcher that catches up takes the lag back to zero.
    Dispatcher().tick()
    _, samples = scrape()
    assert value(samples, "punctual_dispatch_lag_seconds") == 0


def test_processes_count_only_recent_heartbeats(scrape):
    fleet.Registration("dispatcher").beat()
    fleet.Registration("worker").beat()
    gone = fleet.Registration("worker")
    gone.beat()
    from dispatch.models import ProcessHeartbeat

    ProcessHeartbeat.objects.filter(name=gone.name).update(
        last_seen=db_now() - dt.timedelta(seconds=45)
    )
    _, samples = scrape()
    assert value(samples, "punctual_processes", kind="dispatcher") == 1
    assert value(samples, "punctual_processes", kind="worker") == 1


def test_oldest_pending_is_the_oldest_due_waiting_run(scrape, owner):
    job = make_job(owner)
    now = db_now()
    for age, state in ((50, "pending"), (20, "retrying"), (500, "succeeded"), (-30, "pending")):
        Run.objects.create(
            job=job,
            scheduled_at=now - dt.timedelta(seconds=age),
            available_at=now - dt.timedelta(seconds=age),
            state=state,
        )
    _, samples = scrape()
    assert 50 <= value(samples, "punctual_oldest_pending_seconds", target_kind="webhook") < 80
    assert value(samples, "punctual_oldest_pending_seconds", target_kind="pull") == 0


def test_record_deliveries_is_one_statement_per_batch():
    def result(outcome: str, ms: int | None) -> outcomes.Result:
        import uuid

        return outcomes.Result(
            run_id=uuid.uuid4(),
            job_id=uuid.uuid4(),
            attempt=1,
            state="succeeded",
            attempt_outcome=outcome,
            duration_ms=ms,
        )

    batch = [
        result("succeeded", 3),
        result("succeeded", 40),
        result("succeeded", 40),
        result("failed", 2000),
        result("permanent", 1_000_000),
        result("succeeded", None),
    ]
    with CaptureQueriesContext(connection) as queries:
        stats.record_deliveries(batch)
    assert len(queries) == 1
    assert "ON CONFLICT" in queries[0]["sql"]
    stats.record_deliveries(batch[:3])  # the same rows again: added up
    assert stats.record_deliveries([]) == 0

    counters = {
        (s.outcome, s.bucket): (s.deliveries, s.duration_ms) for s in DeliveryStat.objects.all()
    }
    assert counters == {
        ("succeeded", stats.bucket_of(3)): (2, 6),
        ("succeeded", stats.bucket_of(40)): (4, 160),
        ("succeeded", stats.NO_DURATION): (1, 0),
        ("failed", stats.bucket_of(2000)): (1, 2000),
        ("permanent", stats.INF_BUCKET): (1, 1_000_000),
    }


def test_the_histogram_is_cumulative_and_the_counter_counts_every_attempt(scrape):
    import uuid

    batch = [
        outcomes.Result(
            run_id=uuid.uuid4(),
            job_id=uuid.uuid4(),
            attempt=1,
            state="succeeded",
            duration_ms=ms,
        )
        for ms in (5, 5, 30, 900, None)
    ]
    stats.record_deliveries(batch)
    _, samples = scrape()
    assert value(samples, "punctual_deliveries_total", outcome="succeeded") == 5

    def bucket(le: str) -> float:
        return value(samples, "punctual_delivery_seconds_bucket", outcome="succeeded", le=le)

    assert bucket("0.005") == 2
    assert bucket("0.025") == 2
    assert bucket("0.05") == 3
    assert bucket("1.0") == 4
    assert bucket("+Inf") == 4  # the attempt without a duration is not observed
    assert value(samples, "punctual_delivery_seconds_count", outcome="succeeded") == 4
    assert value(samples, "punctual_delivery_seconds_sum", outcome="succeeded") == pytest.approx(
        0.94
    )


@pytest.mark.django_db(transaction=True)
def test_worker_deliveries_are_counted_as_they_complete(scrape, owner, receiver, worker_thread):
    ok = make_job(owner, url=f"{receiver}/ok")
    failing = make_job(owner, url=f"{receiver}/fail", max_attempts=1)
    due_now(ok)
    due_now(failing)
    Dispatcher().tick()
    worker_thread()
    wait_until(
        lambda: Run.objects.filter(state__in=["succeeded", "failed"]).count() == 2,
        message="both runs to finish",
    )

    _, samples = scrape()
    for outcome in ("succeeded", "permanent", "failed"):
        attempts = Attempt.objects.filter(outcome=outcome).count()
        assert value(samples, "punctual_deliveries_total", outcome=outcome) == attempts
    assert value(samples, "punctual_deliveries_total", outcome="succeeded") == 1
    # A 500 on the last attempt is a retryable failure with no attempts left.
    assert value(samples, "punctual_deliveries_total", outcome="failed") == 1
    assert value(samples, "punctual_delivery_seconds_count", outcome="succeeded") == 1
    assert value(samples, "punctual_runs", state="succeeded") == 1
    assert value(samples, "punctual_runs", state="failed") == 1


def test_a_stale_completion_is_not_counted(owner):
    job = make_job(owner)
    due_now(job)
    Dispatcher().tick()
    [claimed] = leases.claim("w1", limit=1, lease_seconds=30)
    stale = outcomes.Result(
        run_id=claimed.run_id, job_id=job.pk, attempt=claimed.attempt, state="succeeded"
    )
    assert outcomes.complete("someone-else", [stale]).stale == [claimed.run_id]
    assert not DeliveryStat.objects.exists()
    assert outcomes.complete("w1", [stale]).applied == [claimed.run_id]
    assert DeliveryStat.objects.get().deliveries == 1


@pytest.mark.django_db(transaction=True)
def test_database_down_scrapes_as_database_up_zero(client, database_down):
    with database_down():
        response = client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    assert "punctual_database_up 0.0" in text
    assert "punctual_runs" not in text


def test_terminal_counts_are_estimated_from_statistics_on_a_big_table(scrape, owner, monkeypatch):
    job = make_job(owner)
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO runs_run (id, job_id, scheduled_at, kind, state, reason, attempt,
                max_attempts, lease_owner, created_at, last_error, target_kind, exclusive)
            SELECT gen_random_uuid(), %s, now() - make_interval(secs => g), 'scheduled',
                   CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END, '', 1, 3, '',
                   now(), '', 'webhook', true
            FROM generate_series(1, 20000) AS g
            """,
            [job.pk],
        )
        cur.execute("ANALYZE runs_run")
    monkeypatch.setattr(metrics, "EXACT_COUNT_PAGES", 1)
    _, samples = scrape()
    assert value(samples, "punctual_runs_estimated") == 1
    assert value(samples, "punctual_runs", state="succeeded") == pytest.approx(18000, rel=0.1)
    assert value(samples, "punctual_runs", state="failed") == pytest.approx(2000, rel=0.2)
    assert value(samples, "punctual_runs", state="cancelled") == 0


def test_a_pull_run_nobody_claims_is_the_oldest_pending_pull_run(scrape, owner):
    job = make_job(owner, target_kind="pull", url="")
    now = db_now()
    at = now - dt.timedelta(seconds=200)
    Run.objects.create(
        job=job, scheduled_at=at, available_at=at, state="pending", target_kind="pull"
    )
    _, samples = scrape()
    assert 200 <= value(samples, "punctual_oldest_pending_seconds", target_kind="pull") < 260
    assert value(samples, "punctual_oldest_pending_seconds", target_kind="webhook") == 0


def test_alerts_are_counted_per_state(scrape, owner):
    from alerts.models import Alert, Channel
    from jobs import crypto

    ops = Channel.objects.create(
        owner=owner, name="ops", url_encrypted=crypto.encrypt("json://x.example/"), masked="-"
    )
    now = db_now()
    for state in ("sent", "sent", "failed"):
        Alert.objects.create(channel=ops, kind="test", state=state, due_at=now, next_attempt_at=now)
    _, samples = scrape()
    assert value(samples, "punctual_alerts", state="sent") == 2
    assert value(samples, "punctual_alerts", state="failed") == 1
    assert value(samples, "punctual_alerts", state="pending") == 0
