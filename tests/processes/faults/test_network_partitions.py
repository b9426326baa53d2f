"""Network partitions between hosts (docs/design/fault-matrix.md;
docs/operating/deployment.md "Across a partition").

Every host is a Linux network namespace (tests/hosts.py): a database host
running its own PostgreSQL server, two worker hosts, two dispatcher hosts and
a receiver host. The workers reach the database and the receiver over two
separate networks, so one path can be cut while the other stays up. A cut is
silent: the host's port on the switch goes down, its packets vanish, and no
connection is reset. The processes are the real ``manage.py dispatch`` and
``manage.py work``, the receiver the real loopback receiver, each started
inside its host with ``ip netns exec``.

Their ``DATABASE_URL`` carries the TCP timeouts that docs/operating/deployment.md
"Across a partition" prescribes, scaled to the scenario's 5 s lease
(``tcp_user_timeout``, keepalives, ``connect_timeout``), and the server
ends sessions whose client vanished (``idle_in_transaction_session_timeout``,
its own keepalives and ``tcp_user_timeout``). Without them a statement on a
dead connection waits for the kernel's retransmissions, about 15 minutes.

* **A worker host cut off from the database** while it delivers: the other
  worker takes its runs over once their leases expire; the cut-off worker
  abandons the deliveries still in flight when its lease lapses by its own
  clock, before anyone can take them over (so no fire is delivered by two
  workers at once), and its completions that could not be written are
  refused by fencing once the network heals; then it claims and completes
  new runs.
* **A worker host cut off from the receiver**: the attempt ends as a timeout
  within ``timeout_seconds`` (plus the deadline's grace), and the run is
  retried and delivered.
* **A dispatcher host cut off from the database**: the dispatcher on the other
  host keeps making the fires, on time; the cut-off one notices, and when it
  returns it makes no fire twice.

Each scenario ends with the fire auditor clean over its own database, with
the receiver's log, and prints what it measured.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from runs.leases import DEADLINE_GRACE_SECONDS
from scheduler_site import localdb
from tests import hosts
from tests.processes.conftest import ROOT, ReceiverHandle, process_env, wait_until

pytestmark = [
    pytest.mark.direct_connection(
        "its processes reach a server of their own across the scenario's network namespaces"
    )
]

LEASE = 5
# Seconds allowed beyond each bound, for a busy machine.
SLACK = 5.0
TCP_USER_TIMEOUT_MS = 3000
# The processes' libpq settings: a statement on a silently dead connection
# fails after tcp_user_timeout, an idle connection is probed by keepalives,
# and a connection attempt to a host that does not answer gives up after
# connect_timeout (libpq's least, 2 s).
CLIENT_TCP = {
    "connect_timeout": 2,
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 2,
    "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
}
IDLE_IN_TRANSACTION_SECONDS = 2
# The server's side: a session whose client vanished inside a transaction
# releases its row locks within idle_in_transaction_session_timeout, and a
# dead connection is dropped by keepalives or tcp_user_timeout.
SERVER_SETTINGS = {
    **localdb.TEST_SETTINGS,
    "idle_in_transaction_session_timeout": f"{IDLE_IN_TRANSACTION_SECONDS}s",
    "tcp_keepalives_idle": "2",
    "tcp_keepalives_interval": "1",
    "tcp_keepalives_count": "2",
    "tcp_user_timeout": str(TCP_USER_TIMEOUT_MS),
}
TEMPLATE = "punctual_template"
RECEIVER_PORT = 8080
UNAVAILABLE = "database unavailable"

# Jobs made by a process on a host, from the JSON in PARTITION_SEED: every
# group's jobs, each with its path on the receiver, interval, timeout and,
# optionally, its first fire that many seconds from now (database time).
SEED = """
import datetime as dt, json, os
from django.contrib.auth import get_user_model
from core.db import db_now
from jobs.models import Job
spec = json.loads(os.environ["PARTITION_SEED"])
owner, _ = get_user_model().objects.get_or_create(username="partitioned")
now = db_now()
made = {}
for group, jobs in spec["jobs"].items():
    for k, j in enumerate(jobs):
        start = now + dt.timedelta(seconds=j["start_in"]) if "start_in" in j else None
        job = Job(owner=owner, name=f"{group}-{k}", url=spec["base"] + j["path"],
                  interval_seconds=j["interval"], start_at=start, overlap_policy="allow",
                  max_attempts=10, retry_backoff_seconds=1, timeout_seconds=j["timeout"])
        job.save()
        made.setdefault(group, []).append(str(job.pk))
print("SEEDED " + json.dumps(made))
"""


class Site:
    """The hosts and the database server of the module's scenarios."""

    def __init__(self, network: hosts.Network, database: hosts.Database) -> None:
        self.network, self.database = network, database
        self.made = 0

    def host(self, name: str) -> hosts.Host:
        return self.network.hosts[name]

    def fresh_database(self) -> str:
        """A database of its own for one scenario, copied from the migrated
        template (a migration per scenario would cost more than the scenario)."""
        self.made += 1
        name = f"partition_{self.made}"
        self.database.query(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}", name="postgres")
        return name


@pytest.fixture(scope="module")
def site():
    reason = hosts.missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    network = hosts.Network()
    # Outside pytest's temporary directories, which a pytest session makes
    # 0700 again, locking the server's user out (as in test_failover.py).
    data_dir = Path(tempfile.mkdtemp(prefix="punctual-partitions-"))
    database = None
    try:
        network.start()
        db_host = network.add_host("db", db=1)
        for name, octet in (("work1", 11), ("work2", 12)):
            network.add_host(name, db=octet, app=octet)
        network.add_host("dispatch1", db=21)
        network.add_host("dispatch2", db=22)
        network.add_host("receiver", app=1)
        database = hosts.start_database(db_host, data_dir, SERVER_SETTINGS)
        database.query(f"CREATE DATABASE {TEMPLATE}", name="postgres")
        migrate = subprocess.run(
            [*network.hosts["dispatch1"].run, sys.executable, "manage.py", "migrate", "-v", "0"],
            cwd=ROOT,
            env=process_env(DATABASE_URL=database.url(TEMPLATE, **CLIENT_TCP)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert migrate.returncode == 0, migrate.stdout + migrate.stderr
        yield Site(network, database)
    finally:
        if database is not None:
            database.stop()
        network.delete()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def scenario(site, processes):
    """The site, every link up again after the test, and its processes
    stopped (the processes fixture) before the module's teardown."""
    yield site
    site.network.heal_all()


class Receiver(ReceiverHandle):
    """The loopback receiver on the receiver host. The test's own namespace
    has no route to it: it reads the receiver's log, which the receiver
    writes out every 0.1 s and at exit."""

    def __init__(self, proc, host: hosts.Host, log_path: Path) -> None:
        super().__init__(proc, RECEIVER_PORT, log_path)
        self.host = host

    def url(self, path: str) -> str:
        return f"http://{self.host.addresses['app']}:{self.port}/{path.lstrip('/')}"

    def flush(self) -> None:
        pass  # written out every 0.1 s, and at exit

    def release(self) -> None:
        """POST /release, from the receiver's own host: every delivery held
        on /held answers 200 now."""
        post = "import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1], method='POST'))"
        subprocess.run(
            [*self.host.run, sys.executable, "-I", "-S", "-c", post, self.url("release")],
            check=True,
            timeout=30,
        )


class Scenario:
    """One scenario's database, processes and evidence."""

    def __init__(self, site: Site, processes, tmp_path: Path) -> None:
        self.site, self.processes, self.tmp_path = site, processes, tmp_path
        self.name = site.fresh_database()
        self.since = self.now() - dt.timedelta(seconds=1)
        self.receiver = self._start_receiver()

    def query(self, sql: str, params=()) -> list[tuple]:
        return self.site.database.query(sql, params, name=self.name)

    def now(self) -> dt.datetime:
        """The database's time."""
        return self.query("SELECT statement_timestamp()")[0][0]

    def env(self, process: str) -> dict[str, str]:
        url = self.site.database.url(self.name, application_name=process, **CLIENT_TCP)
        return process_env(DATABASE_URL=url)

    def _start_receiver(self) -> Receiver:
        host = self.site.host("receiver")
        port_file, log_path = self.tmp_path / "receiver.port", self.tmp_path / "receiver.jsonl"
        proc = self.processes.start(
            "-m",
            "ops.loopback_receiver",
            "--host",
            host.addresses["app"],
            "--port",
            str(RECEIVER_PORT),
            "--log",
            str(log_path),
            "--port-file",
            str(port_file),
            env=self.env("receiver"),
            name="receiver",
            wrapper=host.run,
        )
        wait_until(port_file.exists, timeout=30, message="the receiver to listen")
        return Receiver(proc, host, log_path)

    def start(self, command: str, host: str, *args: str) -> subprocess.Popen:
        """``manage.py command`` on ``host``, named after the host."""
        return self.processes.manage(
            command,
            *args,
            "--name",
            host,
            env=self.env(host),
            name=host,
            wrapper=self.site.host(host).run,
        )

    def worker(self, host: str) -> subprocess.Popen:
        return self.start("work", host, "--lease-seconds", str(LEASE), "--concurrency", "50")

    def seed(self, host: str, jobs: dict[str, list[dict]]) -> dict[str, list[str]]:
        """Make ``jobs`` (see SEED) from ``host``; their ids by group."""
        env = self.env("seed")
        env["PARTITION_SEED"] = json.dumps({"base": self.receiver.url(""), "jobs": jobs})
        proc = self.processes.manage(
            "shell", "-c", SEED, env=env, name="seed", wrapper=self.site.host(host).run
        )
        assert proc.wait(timeout=120) == 0, Path(proc.log_path).read_text()[-3000:]
        line = [x for x in Path(proc.log_path).read_text().splitlines() if "SEEDED" in x][-1]
        return json.loads(line.split("SEEDED ", 1)[1])

    def registered(self, name: str) -> bool:
        return bool(self.query("SELECT 1 FROM dispatch_processheartbeat WHERE name = %s", [name]))

    def active_runs(self) -> int:
        sql = "SELECT count(*) FROM runs_run WHERE state IN ('pending', 'running', 'retrying')"
        return self.query(sql)[0][0]

    def finish(self, dispatchers: list, workers: list) -> str:
        """Stop the dispatchers, let the workers finish every run, stop them
        and the receiver; the auditor's report, which must be clean."""
        for proc in dispatchers:
            assert self.processes.stop(proc) == 0
        wait_until(
            lambda: self.active_runs() == 0, timeout=90, interval=0.5, message="every run to end"
        )
        for proc in [*workers, self.receiver.proc]:
            assert self.processes.stop(proc) == 0
        audit = self.processes.manage(
            "audit_fires",
            "--since",
            self.since.isoformat(),
            "--receiver-log",
            str(self.receiver.log_path),
            env=self.env("audit"),
            name="audit",
            wrapper=self.site.host("dispatch1").run,
        )
        code = audit.wait(timeout=300)
        report = Path(audit.log_path).read_text()
        print(report)
        assert code == 0, report
        return report

    def one_id_per_fire(self) -> Counter:
        """No fire reached the receiver under two ids; the deliveries per id."""
        ids = defaultdict(set)
        per_id: Counter = Counter()
        for entry in self.receiver.entries():
            ids[(entry["job_id"], entry["scheduled_at"])].add(entry["webhook_id"])
            per_id[entry["webhook_id"]] += 1
        two = {fire: found for fire, found in ids.items() if len(found) > 1}
        assert not two, f"fires delivered under two ids: {two}"
        return per_id


def log_since(proc, offset: int) -> str:
    with open(proc.log_path, errors="replace") as log:
        log.seek(offset)
        return log.read()


def log_size(proc) -> int:
    return Path(proc.log_path).stat().st_size


def noticed(proc, offset: int, text: str, cut_at: float, timeout: float) -> float:
    """Seconds from the cut until ``proc`` logged ``text``, polled."""
    wait_until(
        lambda: text in log_since(proc, offset),
        timeout=timeout,
        interval=0.1,
        message=f"{proc.log_path} to log {text!r}",
    )
    return time.time() - cut_at


def test_a_worker_host_cut_off_from_the_database_and_then_from_the_receiver(
    scenario, processes, tmp_path
):
    s = Scenario(scenario, processes, tmp_path)
    network = scenario.network
    work1_host = scenario.host("work1")
    dispatcher = s.start("dispatch", "dispatch1")
    work1 = s.worker("work1")
    wait_until(lambda: s.registered("work1"), timeout=60, message="work1 to start")
    # Two kinds of delivery in flight on work1 when it is cut off: /held ones
    # that the receiver answers right after the cut (their results cannot be
    # written), and /hold-first ones that never answer their first delivery
    # (work1 must give them up). A few steady jobs keep fires coming.
    jobs = s.seed(
        "dispatch1",
        {
            "finished": [dict(path="held", interval=3600, timeout=60, start_in=1)] * 3,
            "abandoned": [dict(path="hold-first", interval=3600, timeout=60, start_in=1)] * 3,
            "steady": [dict(path="ok", interval=2, timeout=3)] * 4,
        },
    )
    targets = jobs["finished"] + jobs["abandoned"]
    wait_until(
        lambda: (
            s.query(
                "SELECT count(*) FROM runs_run WHERE job_id = ANY(%s::uuid[])"
                " AND state = 'running' AND lease_owner = 'work1'",
                [targets],
            )[0][0]
            == len(targets)
            and len({e["job_id"] for e in s.receiver.entries() if e["job_id"] in targets})
            == len(targets)
        ),
        timeout=60,
        interval=0.2,
        message="work1 to deliver the six held runs",
    )
    work2 = s.worker("work2")
    wait_until(lambda: s.registered("work2"), timeout=60, message="work2 to start")

    # -- work1's host loses the database; the receiver stays reachable --------
    offset = log_size(work1)
    cut_at = time.time()
    network.cut(work1_host, "db")
    s.receiver.release()  # the /held deliveries answer: work1 holds results it cannot write
    notice = noticed(work1, offset, UNAVAILABLE, cut_at, timeout=LEASE + SLACK + 5)
    assert notice <= LEASE + SLACK, f"work1 noticed the cut only after {notice:.1f} s"

    def taken_over() -> bool:
        rows = s.query(
            "SELECT count(*) FROM runs_run r JOIN runs_attempt a ON a.run_id = r.id"
            " WHERE r.job_id = ANY(%s::uuid[]) AND r.state = 'succeeded'"
            " AND a.worker = 'work2' AND a.outcome = 'succeeded'",
            [targets],
        )
        return rows[0][0] == len(targets)

    wait_until(taken_over, timeout=LEASE + 30, interval=0.2, message="work2 to take over")
    wait_until(
        lambda: log_since(work1, offset).count("lease lapsed") >= len(jobs["abandoned"]),
        timeout=LEASE + SLACK,
        message="work1 to give up the deliveries it cannot hold",
    )

    def takeover_logged() -> bool:  # the receiver writes its log out every 0.1 s
        logged = {(e["job_id"], e["attempt"]) for e in s.receiver.entries()}
        return all((job, 2) in logged for job in targets)

    wait_until(takeover_logged, timeout=10, message="the receiver's log of the takeover")
    deliveries = s.receiver.entries()
    ends = s.receiver.entries("end")
    takeover = []
    for job in targets:
        first = next(e for e in deliveries if e["job_id"] == job and e["attempt"] == 1)
        second = next(e for e in deliveries if e["job_id"] == job and e["attempt"] == 2)
        takeover.append(second["t"] - cut_at)
        # work1's delivery ended (answered, or given up) before work2's began:
        # the fire was never delivered by both workers at once.
        ended = min(e["t"] for e in ends if e["webhook_id"] == first["webhook_id"])
        assert ended < second["t"], f"run {first['run_id']} was delivered by both workers at once"
    assert max(takeover) <= LEASE + SLACK, f"takeover after {max(takeover):.1f} s"

    healed_at = time.time()
    healed = s.now()
    network.heal(work1_host, "db")
    # work1's results for the /held runs reach the database now, and lose.
    finished_ids = {
        r[0] for r in s.query(
            "SELECT id::text FROM runs_run WHERE job_id = ANY(%s::uuid[])", [jobs["finished"]]
        )
    }  # fmt: skip

    def fenced() -> set[str]:
        lines = [x for x in log_since(work1, offset).splitlines() if "stale completion" in x]
        return {run for run in finished_ids if any(run in x for x in lines)}

    wait_until(
        lambda: fenced() == finished_ids,
        timeout=60,
        interval=0.2,
        message="work1's late completions to be refused",
    )
    stale_lines = log_since(work1, offset).count("stale completion dropped")
    attempts = s.query(
        "SELECT r.job_id::text, a.number, a.worker, a.outcome FROM runs_attempt a"
        " JOIN runs_run r ON r.id = a.run_id WHERE r.job_id = ANY(%s::uuid[])"
        " ORDER BY a.number",
        [targets],
    )
    by_job = defaultdict(list)
    for job, number, worker, outcome in attempts:
        by_job[job].append((number, worker, outcome))
    for job in targets:
        assert by_job[job] == [(1, "work1", "lease_expired"), (2, "work2", "succeeded")], by_job[
            job
        ]

    # work1 rejoins: it claims and completes new runs.
    wait_until(
        lambda: (
            s.query(
                "SELECT count(*) FROM runs_attempt WHERE worker = 'work1' AND outcome = 'succeeded'"
                " AND started_at > %s",
                [healed],
            )[0][0]
            >= 3
        ),
        timeout=60,
        interval=0.5,
        message="work1 to deliver again after the heal",
    )
    rejoined = time.time() - healed_at

    # -- a worker host loses the receiver while it delivers ---------------------
    timeout = 4
    (slow,) = s.seed(
        "dispatch1", {"slow": [dict(path="slow/3", interval=3600, timeout=timeout, start_in=1)]}
    )["slow"]
    first = wait_until(
        lambda: next((e for e in s.receiver.entries() if e["job_id"] == slow), None),
        timeout=60,
        message="the slow run's first delivery",
    )
    (victim,) = s.query("SELECT lease_owner FROM runs_run WHERE id = %s", [first["run_id"]])[0]
    network.cut(scenario.host(victim), "app")
    failed = wait_until(
        lambda: s.query(
            "SELECT a.error, extract(epoch FROM a.finished_at - a.started_at), a.worker"
            " FROM runs_attempt a WHERE a.run_id = %s AND a.number = 1",
            [first["run_id"]],
        ),
        timeout=timeout + DEADLINE_GRACE_SECONDS + SLACK,
        interval=0.2,
        message="the cut-off attempt to end",
    )[0]
    network.heal(scenario.host(victim), "app")
    error, attempt_seconds, worker = failed
    assert worker == victim and f"timed out after {timeout} s" in error, failed
    assert attempt_seconds <= timeout + DEADLINE_GRACE_SECONDS, failed
    wait_until(
        lambda: (
            s.query("SELECT state, attempt FROM runs_run WHERE id = %s", [first["run_id"]])[0][0]
            == "succeeded"
        ),
        timeout=60,
        interval=0.2,
        message="the slow run to be retried and delivered",
    )
    (retried_attempt,) = s.query("SELECT attempt FROM runs_run WHERE id = %s", [first["run_id"]])[0]
    assert retried_attempt >= 2

    s.finish([dispatcher], [work1, work2])
    s.one_id_per_fire()
    print(
        json.dumps(
            {
                "lease_seconds": LEASE,
                "work1_noticed_the_cut_s": round(notice, 2),
                "takeover_after_cut_s": [round(t, 2) for t in sorted(takeover)],
                "deliveries_given_up_at_lapse": log_since(work1, offset).count("lease lapsed"),
                "late_completions_refused": stale_lines,
                "work1_delivering_again_after_heal_s": round(rejoined, 2),
                "receiver_cut_attempt_s": round(float(attempt_seconds), 2),
                "receiver_cut_attempts_to_deliver": retried_attempt,
            }
        )
    )


def test_the_dispatcher_host_cut_off_from_the_database(scenario, processes, tmp_path):
    s = Scenario(scenario, processes, tmp_path)
    network = scenario.network
    dispatchers = [s.start("dispatch", name) for name in ("dispatch1", "dispatch2")]
    worker = s.worker("work1")
    jobs = s.seed("dispatch2", {"every-second": [dict(path="ok", interval=1, timeout=5)] * 20})
    fires = len(jobs["every-second"])
    wait_until(
        lambda: (
            s.registered("dispatch1")
            and s.registered("dispatch2")
            and s.query("SELECT count(*) FROM runs_run WHERE state = 'succeeded'")[0][0]
            >= 3 * fires
        ),
        timeout=60,
        interval=0.5,
        message="both dispatchers up and fires delivered",
    )
    # Cut while dispatch1 is inside its tick's transaction if the test sees
    # it there (its row locks then stay on the server until the server ends
    # the session): tried for a few seconds, then cut anyway.
    in_tick = (
        "SELECT 1 FROM pg_stat_activity WHERE application_name = 'dispatch1'"
        " AND xact_start IS NOT NULL"
    )
    deadline = time.monotonic() + 5
    with s.site.database.connect(s.name) as watch:
        while time.monotonic() < deadline and not watch.execute(in_tick).fetchone():
            pass
        offset = log_size(dispatchers[0])
        cut_at = time.time()
        network.cut(scenario.host("dispatch1"), "db")
        cut = watch.execute("SELECT statement_timestamp()").fetchone()[0]
        inside = bool(watch.execute(in_tick).fetchone())
    notice = noticed(dispatchers[0], offset, UNAVAILABLE, cut_at, timeout=LEASE + SLACK + 5)
    until = cut + dt.timedelta(seconds=8)
    wait_until(
        lambda: s.query(
            "SELECT count(*) FROM runs_run WHERE scheduled_at >= %s", [until]
        )[0][0]
        >= fires,
        timeout=60,
        interval=0.2,
        message="dispatch2 to make the fires of eight seconds of the cut",
    )  # fmt: skip
    healed = s.now()
    network.heal(scenario.host("dispatch1"), "db")
    lag, made = s.query(
        "SELECT extract(epoch FROM max(created_at - scheduled_at)), count(*) FROM runs_run"
        " WHERE scheduled_at BETWEEN %s AND %s",
        [cut, healed],
    )[0]
    # dispatch1 returns: it beats again, and its ticks make nothing twice.
    wait_until(
        lambda: s.query(
            "SELECT 1 FROM dispatch_processheartbeat WHERE name = 'dispatch1' AND last_seen > %s",
            [healed],
        ),
        timeout=60,
        interval=0.2,
        message="dispatch1 to come back",
    )
    back = s.now()
    wait_until(
        lambda: (
            s.query(
                "SELECT count(*) FROM runs_run WHERE scheduled_at >= %s",
                [back + dt.timedelta(seconds=3)],
            )[0][0]
            >= fires
        ),
        timeout=60,
        interval=0.2,
        message="three more seconds of fires with both dispatchers",
    )
    s.finish(dispatchers, [worker])
    per_id = s.one_id_per_fire()
    assert set(per_id.values()) == {1}, "a fire was delivered twice"
    duplicates = s.query(
        "SELECT count(*) FROM (SELECT 1 FROM runs_run GROUP BY job_id, scheduled_at"
        " HAVING count(*) > 1) d"
    )[0][0]
    assert duplicates == 0
    assert made >= fires * 8, f"only {made} fires made during the cut"
    assert float(lag) <= IDLE_IN_TRANSACTION_SECONDS + SLACK, f"fires {lag:.1f} s late"
    print(
        json.dumps(
            {
                "cut_inside_a_tick": inside,
                "dispatch1_noticed_the_cut_s": round(notice, 2),
                "cut_s": round((healed - cut).total_seconds(), 2),
                "fires_made_during_the_cut": made,
                "max_lag_during_the_cut_s": round(float(lag), 2),
                "fires_delivered": len(per_id),
            }
        )
    )
