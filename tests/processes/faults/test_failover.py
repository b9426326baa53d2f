"""PostgreSQL failover under load (README "High availability", "Fault matrix").

A primary and a streaming standby of the embedded PostgreSQL run in private
data directories; every process is given both, in ``DATABASE_URL``'s
multi-host form with ``target_session_attrs=read-write``. Two dispatchers, two
workers and the loopback receiver carry a few hundred jobs when the
primary's host is lost: every server process frozen and SIGKILLed at one
instant. While the standby is still read-only every process must fail to
connect and retry, never write to it; then the standby is promoted, and each
process must find it by itself and carry on.

* **Synchronous** (the standby in ``synchronous_standby_names``): a commit
  returned only once the standby had it, so nothing a process was told had
  committed is lost: every fire delivered before the kill still has the run
  row made before the kill, and the auditor is clean.
* **Asynchronous**: the last commits before the kill may never have reached
  the standby. What was lost is measured against the old primary itself,
  started again (read-only, out of the processes' reach) after the scenario:
  its runs that the new primary lacked. A lost fire is made again by the
  dispatcher from the job's rolled-back ``next_fire_at``, under the same id
  (runs/identity.py); the test asserts that no fire reached the receiver
  under two ids and that every lost fire is either made again or named by the
  auditor, not how many were lost.

Both print what they measured (``-s``, or the log of a failed test): the gap
in deliveries, the fires made again with the same ids, the fires lost.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from ops.audit import read_receiver_log
from scheduler_site import localdb
from tests.processes.conftest import ReceiverHandle, process_env, wait_until

JOBS = 300
INTERVAL = 2  # seconds: JOBS / INTERVAL fires a second
STANDBY = "replica"

# The jobs, made by a process of their own against the pair (this test's
# Django connection is the session's database, not the pair).
SEED = """
from django.contrib.auth import get_user_model
from jobs.models import Job
owner = get_user_model().objects.create_user("failover", password="pw-failover-123")
for k in range({jobs}):
    Job(owner=owner, name=f"failover-{{k}}", url={url!r}, interval_seconds={interval},
        overlap_policy="allow", max_attempts=5, retry_backoff_seconds=1,
        timeout_seconds=10).save()
"""

OUTAGE_SEEN = ("database unavailable", "wake-up connection lost")


class Pair:
    """The primary and the standby, and the URL that names both."""

    def __init__(self, root: Path) -> None:
        self.primary, self.standby = root / "primary", root / "standby"
        hosts = ",".join(
            quote(str(localdb.socket_dir(d)), safe="") for d in (self.primary, self.standby)
        )
        self.url = f"postgres://{localdb.USER}@{hosts}/{localdb.DATABASE}"
        self.url += "?target_session_attrs=read-write"

    def start(self, synchronous: bool) -> None:
        localdb.start(self.primary, settings=localdb.TEST_SETTINGS)
        localdb.start_standby(
            self.primary, self.standby, name=STANDBY, settings=localdb.TEST_SETTINGS
        )
        if synchronous:
            localdb.require_synchronous(self.primary, STANDBY)

    def query(self, sql: str, params=()) -> list[tuple]:
        """``sql`` on whichever server is the primary now."""
        hosts = f"{localdb.socket_dir(self.primary)},{localdb.socket_dir(self.standby)}"
        with psycopg.connect(
            host=hosts,
            user=localdb.USER,
            dbname=localdb.DATABASE,
            target_session_attrs="read-write",
            connect_timeout=5,
        ) as conn:
            return conn.execute(sql, params).fetchall()

    def lagging(self, mode: str, receiver: ReceiverHandle, delivered: int) -> bool:
        """The primary has commits that the standby has not received: a
        synchronous primary has a commit waiting for the standby; an
        asynchronous one has acknowledged a second's worth of fires more
        (their claims were committed before they were delivered)."""
        if mode == "sync":
            waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
            return self.query(waiting)[0][0] > 0
        return receiver.stats()["count"] >= delivered + JOBS / INTERVAL

    def stop(self) -> None:
        for data_dir in (self.standby, self.primary):
            try:
                localdb.stop(data_dir, mode="immediate")
            except Exception as exc:  # a crashed primary; cleanup goes on
                print(f"stopping {data_dir}: {exc}")


def old_primary_runs(pair: Pair) -> dict[str, tuple]:
    """Every run the old primary had committed when it was killed: its data
    directory, moved out of the URL's reach, started again read-only."""
    old = pair.primary.with_name("old-primary")
    pair.primary.rename(old)
    localdb.start(old, settings={**localdb.TEST_SETTINGS, "default_transaction_read_only": "on"})
    try:
        with psycopg.connect(
            host=str(localdb.socket_dir(old)), user=localdb.USER, dbname=localdb.DATABASE
        ) as conn:
            rows = conn.execute("SELECT id::text, job_id::text, scheduled_at FROM runs_run")
            return {run_id: (job, at) for run_id, job, at in rows.fetchall()}
    finally:
        localdb.stop(old, mode="immediate")


def met_the_outage(proc, offset: int) -> bool:
    """The process has logged the primary's loss since ``offset`` of its log;
    it fails the test at once if it has written to the read-only standby."""
    with open(proc.log_path, errors="replace") as log:
        log.seek(offset)
        text = log.read()
    assert "read-only transaction" not in text, f"{proc.log_path} wrote to the read-only standby"
    return any(s in text for s in OUTAGE_SEEN)


@pytest.fixture
def servers_dir():
    """Where the two data directories live: outside pytest's temporary
    directories, which any pytest session that starts on this machine makes
    0700 again, locking the servers' user out of its own files (the session's
    server lives outside them too: scheduler_site/settings_test.py)."""
    path = Path(tempfile.mkdtemp(prefix="punctual-failover-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("synchronous", [True, False], ids=["sync", "async"])
def test_failover_to_a_promoted_standby(synchronous, processes, tmp_path, servers_dir):
    mode = "sync" if synchronous else "async"
    pair = Pair(servers_dir)
    try:
        pair.start(synchronous)
        _scenario(mode, pair, processes, tmp_path)
    finally:
        pair.stop()


def _scenario(mode: str, pair: Pair, processes, tmp_path: Path) -> None:
    env = process_env(DATABASE_URL=pair.url)
    receiver = start_receiver(processes, tmp_path, env)
    t0 = time.monotonic()
    run_to_end(processes, processes.manage("migrate", "-v", "0", env=env), "migrate")
    seed = SEED.format(jobs=JOBS, url=receiver.url("ok"), interval=INTERVAL)
    since = pair.query("SELECT statement_timestamp() - interval '1 second'")[0][0]
    run_to_end(processes, processes.manage("shell", "-c", seed, env=env), "seed")
    print(f"[{mode}] two servers, migrated and seeded in {time.monotonic() - t0:.1f} s")

    loops = [processes.manage("dispatch", env=env, name=f"dispatch{k}") for k in (0, 1)]
    loops += [
        processes.manage("work", "--lease-seconds", "5", env=env, name=f"work{k}") for k in (0, 1)
    ]
    wait_until(
        lambda: receiver.stats()["count"] >= 3 * JOBS,
        timeout=120,
        interval=0.5,
        message="deliveries flowing",
    )
    (sync_state,) = pair.query("SELECT sync_state FROM pg_stat_replication")[0]
    assert sync_state == mode, f"the standby replicates {sync_state}, not {mode}"

    # The standby falls behind, as over a congested link: the primary's WAL
    # sender is frozen. A synchronous primary then holds every commit until
    # the standby has it; an asynchronous one acknowledges them regardless.
    (sender,) = pair.query("SELECT pid FROM pg_stat_replication")[0]
    os.kill(sender, signal.SIGSTOP)
    delivered = receiver.stats()["count"]
    wait_until(
        lambda: pair.lagging(mode, receiver, delivered),
        timeout=60,
        interval=0.2,
        message="commits the standby does not have",
    )
    (unsent,) = pair.query("SELECT pg_current_wal_lsn() - sent_lsn FROM pg_stat_replication")[0]
    offsets = [Path(p.log_path).stat().st_size for p in loops]
    localdb.crash(pair.primary)
    killed = time.time()
    # The standby stays read-only until every process has met the outage:
    # they retry against both hosts and libpq refuses the standby for them.
    wait_until(
        lambda: all(met_the_outage(p, o) for p, o in zip(loops, offsets, strict=True)),
        timeout=60,
        interval=0.2,
        message="every process to see the primary gone",
    )
    localdb.promote(pair.standby)
    promoted = time.time()
    after = dt.datetime.fromtimestamp(promoted, dt.UTC)
    wait_until(
        lambda: (
            pair.query(
                "SELECT count(*) FROM runs_run WHERE scheduled_at > %s AND state = 'succeeded'",
                [after],
            )[0][0]
            >= 2 * JOBS
        ),
        timeout=90,
        interval=0.5,
        message="fires after the promotion to be dispatched and delivered",
    )
    assert [p.poll() for p in loops] == [None] * 4, "a process died"
    for proc, offset in zip(loops, offsets, strict=True):
        met_the_outage(proc, offset)

    for proc in loops[:2]:
        proc.send_signal(signal.SIGTERM)
    assert [p.wait(timeout=60) for p in loops[:2]] == [0, 0]
    wait_until(
        lambda: (
            pair.query(
                "SELECT count(*) FROM runs_run WHERE state IN ('pending', 'running', 'retrying')"
            )[0][0]
            == 0
        ),
        timeout=60,
        interval=0.5,
        message="every run to finish",
    )
    for proc in loops[2:]:
        proc.send_signal(signal.SIGTERM)
    assert [p.wait(timeout=60) for p in loops[2:]] == [0, 0]
    receiver.flush()
    audit = processes.manage(
        "audit_fires",
        "--since",
        since.isoformat(),
        "--receiver-log",
        str(receiver.log_path),
        env=env,
        name="audit",
    )
    audit_ok = audit.wait(timeout=300) == 0
    report = Path(audit.log_path).read_text()
    print(report)

    new_runs = {
        run_id: created
        for run_id, created in pair.query("SELECT id::text, created_at FROM runs_run")
    }
    old_runs = old_primary_runs(pair)
    deliveries = list(read_receiver_log(receiver.log_path))
    made_before_kill = {i for i, created in new_runs.items() if created.timestamp() < killed}
    made_again = sorted(i for i in old_runs if i in new_runs and i not in made_before_kill)
    lost = sorted(i for i in old_runs if i not in new_runs)
    delivered_before = {d.webhook_id for d in deliveries if d.t < killed}
    delivered_after = {d.webhook_id for d in deliveries if d.t >= promoted}
    resumed = min(d.t for d in deliveries if d.t >= promoted)
    ids_per_fire = defaultdict(set)
    for d in deliveries:
        ids_per_fire[(d.job_id, d.scheduled_at)].add(d.webhook_id)

    print(
        json.dumps(
            {
                "mode": mode,
                "fires_per_second": JOBS / INTERVAL,
                "wal_bytes_never_sent": int(unsent),
                "promoted_after_kill_s": round(promoted - killed, 2),
                "first_delivery_after_promotion_s": round(resumed - promoted, 2),
                "delivery_gap_from_kill_s": round(resumed - killed, 2),
                "runs_on_old_primary": len(old_runs),
                "made_again_same_id": len(made_again),
                "lost": len(lost),
                "redelivered_same_id": len(delivered_before & delivered_after),
                "audit_clean": audit_ok,
            }
        )
    )

    two_ids = {fire: ids for fire, ids in ids_per_fire.items() if len(ids) > 1}
    assert not two_ids, f"fires delivered under two ids: {two_ids}"
    assert "two ids for one fire" not in report
    # Every fire delivered has its run on the new primary, or the auditor names it.
    unnamed = [
        d.webhook_id
        for d in deliveries
        if d.webhook_id not in new_runs and d.webhook_id not in report
    ]
    assert not unnamed, f"delivered, no run, and the auditor is silent: {unnamed[:10]}"
    # Every run the old primary had is on the new one, or the auditor names its job.
    unnamed_lost = [i for i in lost if old_runs[i][0] not in report]
    assert not unnamed_lost, f"lost and the auditor is silent: {unnamed_lost[:10]}"
    if mode == "sync":
        # A delivery follows the claim's commit: every fire delivered before
        # the kill was committed, so its run row made then survives.
        acknowledged_lost = sorted(delivered_before - made_before_kill)
        assert not acknowledged_lost, f"acknowledged, then lost: {acknowledged_lost[:10]}"
        assert audit_ok, report
    elif not lost:
        assert audit_ok, report


def start_receiver(processes, tmp_path: Path, env: dict) -> ReceiverHandle:
    """The loopback receiver, logging lean lines (ids and times, no bodies)."""
    port_file, log_path = tmp_path / "receiver.port", tmp_path / "receiver.jsonl"
    proc = processes.start(
        "-m",
        "ops.loopback_receiver",
        "--lean",
        "--log",
        str(log_path),
        "--port-file",
        str(port_file),
        env=env,
        name="receiver",
    )
    wait_until(port_file.exists, timeout=30, message="the receiver to listen")
    return ReceiverHandle(proc, int(port_file.read_text()), log_path)


def run_to_end(processes, proc, what: str) -> None:
    code = proc.wait(timeout=300)
    assert code == 0, f"{what} failed ({code}): {Path(proc.log_path).read_text()[-3000:]}"
