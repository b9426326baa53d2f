"""PostgreSQL failover under load (docs/operating/high-availability.md;
docs/design/fault-matrix.md).

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

  The scenario must lose something to prove anything, and it does by
  construction: once the WAL sender is frozen nothing more reaches the
  standby, and the primary is killed only once it has made a second's worth
  of fires since (their ``created_at`` later than the freeze), some of them
  delivered; before the promotion the test reads the standby itself and
  asserts that it has none of them. It then asserts that fires were made
  again under their ids and delivered again under the same ``webhook-id``.

gunicorn serves the API throughout: while no server accepts writes, a write
answers 503 with ``Retry-After`` (never a 500) and health answers 503; after
the promotion the same gunicorn takes writes again, and a run triggered
through it is delivered.

In the pooled run (``make test-pooler``) every process reaches the pair
through a PgBouncer in transaction mode, pointed at the primary and re-pointed
at the promoted standby, as Patroni's ``on_role_change`` callback or a moving
virtual IP does; only the workers' ``LISTEN`` connections and ``migrate`` use
the pair's multi-host URL directly (docs/operating/poolers.md).

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
import requests

from ops.audit import read_receiver_log
from ops.bench import processes as bench
from scheduler_site import localdb
from tests import pooler
from tests.processes.conftest import ReceiverHandle, process_env, wait_until

JOBS = 300
INTERVAL = 2  # seconds: JOBS / INTERVAL fires a second
STANDBY = "replica"

# The jobs, made by a process of their own against the pair (this test's
# Django connection is the session's database, not the pair).
SEED = """
from jobs.management.commands.create_owner import create_owner
from jobs.models import Job
owner, key = create_owner("failover", password="pw-failover-123", superuser=False)
for k in range({jobs}):
    Job(owner=owner, name=f"failover-{{k}}", url={url!r}, interval_seconds={interval},
        overlap_policy="allow", max_attempts=5, retry_backoff_seconds=1,
        timeout_seconds=10).save()
print("TOKEN=" + key)
"""
# The pooler in front of the pair gives up on a server it cannot reach within
# seconds, so that a process meets the outage and retries, instead of
# queueing for PgBouncer's default two minutes (docs/operating/high-availability.md
# "Behind PgBouncer").
POOLER_SETTINGS = {"query_wait_timeout": "3", "server_login_retry": "1"}

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

    def waiting_for_standby(self) -> bool:
        """A synchronous primary has a commit waiting for the standby."""
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        return self.query(waiting)[0][0] > 0

    def fires_since(self, frozen: dt.datetime) -> tuple[set[str], set[str]]:
        """The runs made since ``frozen`` (their ``created_at``, the
        dispatcher's reading of the server's clock before its insert, is
        later), and those of them already delivered: on the primary."""
        rows = self.query("SELECT id::text, state FROM runs_run WHERE created_at > %s", [frozen])
        return {i for i, _ in rows}, {i for i, state in rows if state == "succeeded"}

    def on_standby(self, sql: str, params=()) -> list[tuple]:
        """``sql`` on the standby itself (a hot standby answers reads)."""
        with psycopg.connect(
            host=str(localdb.socket_dir(self.standby)),
            user=localdb.USER,
            dbname=localdb.DATABASE,
            connect_timeout=5,
        ) as conn:
            return conn.execute(sql, params).fetchall()

    def replay_settled(self) -> bool:
        """The standby's replay has stopped moving: it applied what it
        received (a promotion first replays whatever was received). Not
        "replay >= receive": a primary killed mid-stream can leave a partial
        record received that is never replayed. Settled: the same replay
        position at two polls at least a second apart."""
        lsn = self.on_standby("SELECT pg_last_wal_replay_lsn()::text")[0][0]
        now = time.monotonic()
        seen = getattr(self, "_replay_seen", None)
        if seen is None or seen[0] != lsn:
            self._replay_seen = (lsn, now)
            return False
        return now - seen[1] >= 1.0

    def pooler(self) -> pooler.PgBouncer:
        """A PgBouncer in transaction mode in front of the primary."""
        server = {
            "HOST": str(localdb.socket_dir(self.primary)),
            "PORT": None,
            "USER": localdb.USER,
            "PASSWORD": "",
            "NAME": localdb.DATABASE,
        }
        return pooler.PgBouncer(server, settings=POOLER_SETTINGS).start()

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


class Web:
    """gunicorn, as the Procfile runs it, and an owner's token."""

    def __init__(self, processes, env: dict, token: str) -> None:
        proc, port = bench.start_web(processes.tmp_path, env=env)
        processes.adopt(proc, processes.tmp_path / "web.out")
        self.base = f"http://127.0.0.1:{port}"
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Token {token}"

    def get(self, path: str) -> requests.Response:
        return self.http.get(self.base + path, timeout=60)

    def sign_in(self, username: str, password: str) -> requests.Session:
        """A browser's session, signed in to the admin."""
        browser = requests.Session()
        page = browser.get(f"{self.base}/admin/login/", timeout=60)
        form = {
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": page.cookies["csrftoken"],
            "next": "/admin/",
        }
        signed_in = browser.post(
            f"{self.base}/admin/login/", data=form, timeout=60, headers={"Referer": page.url}
        )
        assert signed_in.url.endswith("/admin/"), signed_in.text[:500]
        return browser

    def trigger(self, job_id: str) -> requests.Response:
        return self.http.post(f"{self.base}/api/v1/jobs/{job_id}/trigger/", timeout=60)


def pair_env(pair: Pair, bouncer: pooler.PgBouncer | None) -> dict[str, str]:
    """Every process's environment: the pair's URL, or the pooler in front of
    it with the LISTEN connection on the pair's URL."""
    if bouncer is None:
        env = process_env(DATABASE_URL=pair.url)
        env.pop("PUNCTUAL_LISTEN_DATABASE_URL", None)
        env.pop("PUNCTUAL_TRANSACTION_POOLER", None)
        return env
    return process_env(
        DATABASE_URL=bouncer.url(localdb.DATABASE),
        PUNCTUAL_TRANSACTION_POOLER="true",
        PUNCTUAL_LISTEN_DATABASE_URL=pair.url,
    )


@pytest.mark.pooler
@pytest.mark.parametrize("synchronous", [True, False], ids=["sync", "async"])
def test_failover_to_a_promoted_standby(synchronous, processes, tmp_path, servers_dir):
    mode = "sync" if synchronous else "async"
    pair = Pair(servers_dir)
    bouncer = None
    try:
        pair.start(synchronous)
        if pooler.requested():
            bouncer = pair.pooler()
        _scenario(mode, pair, bouncer, processes, tmp_path)
    finally:
        if bouncer is not None:
            bouncer.stop()
        pair.stop()


def _scenario(
    mode: str, pair: Pair, bouncer: pooler.PgBouncer | None, processes, tmp_path: Path
) -> None:
    env = pair_env(pair, bouncer)
    direct = pair_env(pair, None)  # migrate never goes through a pooler
    receiver = start_receiver(processes, tmp_path, env)
    t0 = time.monotonic()
    run_to_end(processes, processes.manage("migrate", "-v", "0", env=direct), "migrate")
    seed = SEED.format(jobs=JOBS, url=receiver.url("ok"), interval=INTERVAL)
    since = pair.query("SELECT statement_timestamp() - interval '1 second'")[0][0]
    seeder = processes.manage("shell", "-c", seed, env=env, name="seed")
    run_to_end(processes, seeder, "seed")
    token = Path(seeder.log_path).read_text().rsplit("TOKEN=", 1)[1].split()[0]
    print(f"[{mode}] two servers, migrated and seeded in {time.monotonic() - t0:.1f} s")
    if bouncer is not None:
        print(f"[{mode}] every process through PgBouncer, LISTEN direct")

    web = Web(processes, env, token)
    (a_job,) = pair.query("SELECT id::text FROM jobs_job ORDER BY name LIMIT 1")[0]
    listed = web.get("/api/v1/jobs/?page_size=1")
    assert listed.status_code == 200, listed.text
    browser = web.sign_in("failover", "pw-failover-123")
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
    if bouncer is not None:
        # gunicorn, both dispatchers and both workers hold pooler clients.
        clients = bouncer.admin("SHOW CLIENTS")
        assert len(clients) >= 5, f"not every process goes through the pooler: {clients}"
    (sync_state,) = pair.query("SELECT sync_state FROM pg_stat_replication")[0]
    assert sync_state == mode, f"the standby replicates {sync_state}, not {mode}"

    # The standby falls behind, as over a congested link: the primary's WAL
    # sender is frozen, so nothing the primary writes from this instant on
    # ever reaches the standby. A synchronous primary then holds every commit
    # until the standby has it; an asynchronous one acknowledges them
    # regardless. (Pausing replay on the standby would not do: a promotion
    # first replays every WAL record the standby has received.)
    (sender,) = pair.query("SELECT pid FROM pg_stat_replication")[0]
    os.kill(sender, signal.SIGSTOP)
    (frozen,) = pair.query("SELECT clock_timestamp()")[0]
    beyond_standby: set[str] = set()
    if mode == "sync":
        wait_until(
            pair.waiting_for_standby,
            timeout=60,
            interval=0.2,
            message="a commit waiting for the standby",
        )
    else:
        # Fires made after the freeze, a second's worth, some of them
        # delivered: the standby cannot have them, so they are lost with the
        # primary, must be made again under their ids and the delivered ones
        # delivered again under theirs. Counted on the primary itself, not
        # from deliveries, which a backlog of older runs can account for.
        def behind() -> bool:
            made, delivered = pair.fires_since(frozen)
            return len(made) >= JOBS / INTERVAL and len(delivered) >= 10

        wait_until(
            behind,
            timeout=60,
            interval=0.2,
            message="fires made and delivered that the standby does not have",
        )
        beyond_standby, _ = pair.fires_since(frozen)
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
    # The web, meanwhile: no 500, and nothing written.
    refused = web.trigger(a_job)
    assert refused.status_code == 503, (refused.status_code, refused.text[:500])
    assert refused.headers["Retry-After"] == "5"
    assert "database is unavailable" in refused.json()["detail"]
    health = web.get("/api/v1/health/")
    assert health.status_code == 503, health.text
    assert "database unavailable" in health.json()["reasons"], health.text
    page = browser.get(f"{web.base}/admin/jobs/job/", timeout=60)
    assert page.status_code == 503, (page.status_code, page.text[:500])
    assert page.headers["Retry-After"] == "5"
    if mode == "async":
        # What the standby will be promoted with: none of the fires made
        # after the freeze.
        wait_until(
            pair.replay_settled,
            timeout=60,
            interval=0.2,
            message="the standby's replay to settle",
        )
        reached = pair.on_standby(
            "SELECT id::text FROM runs_run WHERE id = ANY(%s::uuid[])", [sorted(beyond_standby)]
        )
        assert not reached, f"the standby has {len(reached)} fires made after the freeze"
    localdb.promote(pair.standby)
    if bouncer is not None:
        bouncer.point_at(str(localdb.socket_dir(pair.standby)))
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
    # The same gunicorn takes writes again, and what it wrote is delivered.
    page = browser.get(f"{web.base}/admin/jobs/job/", timeout=60)
    assert page.status_code == 200, (page.status_code, page.text[:500])
    triggered = web.trigger(a_job)
    assert triggered.status_code == 201, triggered.text
    manual_id = triggered.json()["id"]
    wait_until(
        lambda: (
            pair.query("SELECT state FROM runs_run WHERE id = %s", [manual_id]) == [("succeeded",)]
        ),
        timeout=60,
        interval=0.5,
        message="the run triggered through the web after the promotion to be delivered",
    )
    wait_until(
        lambda: web.get("/api/v1/health/").status_code == 200,
        timeout=60,
        interval=1,
        message="health to answer ok on the new primary",
    )

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
                "through_pgbouncer": bouncer is not None,
                "fires_per_second": JOBS / INTERVAL,
                "wal_bytes_never_sent": int(unsent),
                "fires_made_after_freeze": len(beyond_standby),
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
    assert manual_id in {d.webhook_id for d in deliveries}, (
        "the web's run never reached the receiver"
    )
    if mode == "sync":
        # A delivery follows the claim's commit: every fire delivered before
        # the kill was committed, so its run row made then survives.
        acknowledged_lost = sorted(delivered_before - made_before_kill)
        assert not acknowledged_lost, f"acknowledged, then lost: {acknowledged_lost[:10]}"
        assert audit_ok, report
        return
    # Asynchronous: the standby lacked a second's worth of fires, some of
    # them delivered, so runs the old primary had made are missing from the
    # new one; each must
    # come back under its own id (made again from the job's rolled-back
    # next_fire_at), and deliveries whose claims were lost go out again under
    # the same webhook-id.
    assert made_again, "no fire was lost and made again: the standby was not behind"
    assert delivered_before & delivered_after, "no delivery was repeated under its id"
    if not lost:
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
