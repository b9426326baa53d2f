"""``make run`` for real, from a fresh clone.

The clone is of this repository's committed HEAD, so the test checks what a
newcomer gets, not the working tree. (``MAKE_RUN_TEST_SOURCE=worktree`` copies
the files git would commit instead, to try uncommitted changes.) It:

1. runs ``make run`` in its own session (venv, the runtime install with
   pip's progress and no development tools, the embedded PostgreSQL in
   var/pg/, migrate, demo, honcho); the site's root redirects to the admin;
2. polls the REST API, with the token the demo printed, until the demo job
   has 2 succeeded runs whose deliveries the demo receiver verified;
3. creates a job of its own through the API, pointed at the demo's catch-all
   receiver with ``?status=500``, and watches it retry, fail twice and pause
   itself (``pause_after_failures`` 2); ``make manage`` reads it meanwhile;
4. sends SIGINT to the process group, as Ctrl-C does, and checks that every
   process it started (honcho puts each Procfile entry in a session of its
   own, so the whole tree is tracked) is gone, without honcho's SIGKILL, and
   that the embedded PostgreSQL has stopped; the output stayed quiet: no
   SECRET_KEY warning, no access log, no traceback, no make error;
5. runs ``make run PORT=<another port>`` again: same owner, same password
   and token, the jobs, deliveries continue, now to the receiver on the new
   port (the demo job follows it); then Ctrl-C again;
6. ``make manage`` with no server running starts the embedded PostgreSQL for
   its command and stops it after.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
import requests

from scheduler_site import localdb

pytestmark = [
    pytest.mark.processes,
    pytest.mark.direct_connection(
        "`make run` starts its own embedded PostgreSQL and never touches the session's database"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
PORT = 8000  # what a newcomer's `make run` serves on
INSTALL_DEADLINE = 900  # a cold pip cache may download every dependency
DELIVERY_DEADLINE = 180
PAUSE_DEADLINE = 180
STOP_DEADLINE = 60
MANAGE_DEADLINE = 180


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def another_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_machine_env() -> dict[str, str]:
    """The environment of a newcomer's shell: none of this test run's settings."""
    drop = {"DATABASE_URL", "DJANGO_SETTINGS_MODULE", "SECRET_KEY", "DEBUG", "VIRTUAL_ENV", "PORT"}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("PUNCTUAL_", "PYTEST_", "PYTHON"))
    }
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


def process_table() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (ppid, pgid, sid, state), from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # The command name is in parentheses and may contain spaces.
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
    return table


class MakeRun:
    """One ``make run`` in its own session, and every process it ever started."""

    def __init__(self, clone: Path, log: Path, port: int = PORT) -> None:
        self.clone = clone.resolve()
        self.log = log
        self.base = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            ["make", "run"] if port == PORT else ["make", "run", f"PORT={port}"],
            cwd=clone,
            env=fresh_machine_env(),
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pids: set[int] = {self.proc.pid}
        self.groups: set[int] = {self.proc.pid}  # pgids and session ids

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def track(self) -> None:
        """Record the current descendants (honcho's children use new sessions)."""
        table = process_table()
        frontier, seen = [self.proc.pid], {self.proc.pid}
        while frontier:
            parent = frontier.pop()
            for pid, (ppid, pgid, sid, _) in table.items():
                if ppid == parent and pid not in seen:
                    seen.add(pid)
                    self.pids.add(pid)
                    self.groups.update((pgid, sid))
                    frontier.append(pid)

    def alive(self) -> list[int]:
        """Live processes of this run: tracked, in a tracked group or session, or
        working in the clone (that catches any that escaped the tracking)."""
        return [
            pid
            for pid, (_, pgid, sid, state) in process_table().items()
            if state != "Z"  # a zombie is dead; only its parent's wait() is missing
            and (
                pid in self.pids
                or pgid in self.groups
                or sid in self.groups
                or self._works_in_clone(pid)
            )
        ]

    def _works_in_clone(self, pid: int) -> bool:
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            return False
        return cwd == self.clone or self.clone in cwd.parents

    def ctrl_c(self) -> None:
        self.track()
        os.killpg(self.proc.pid, signal.SIGINT)

    def kill(self) -> None:
        for pid in self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def poll(predicate, timeout: float, message: str, run: MakeRun):
    deadline = time.monotonic() + timeout
    while True:
        run.track()
        value = predicate()
        if value:
            return value
        if run.proc.poll() is not None:
            pytest.fail(f"make run exited ({run.proc.returncode}) while waiting for {message}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message}")
        time.sleep(0.5)


def demo_banner(run: MakeRun) -> dict[str, str] | None:
    text = run.output()
    token = re.search(r"^API token: (\S+)$", text, re.M)
    job = re.search(r"demo job\s+([0-9a-f-]{36})", text)
    password = re.search(r"user admin  password (\S+)", text)
    if not (token and job and password):
        return None
    return {"token": token[1], "job": job[1], "password": password[1], "text": text}


def get_json(base: str, path: str, token: str | None = None) -> dict | None:
    headers = {"Authorization": f"Token {token}"} if token else {}
    try:
        response = requests.get(f"{base}{path}", headers=headers, timeout=10)
        return response.json() if response.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None  # the web app is still starting


def verified_successes(base: str, job_id: str, token: str) -> set[str]:
    """Runs the API reports succeeded whose delivery the receiver verified."""
    runs = get_json(base, f"/api/v1/runs/?job={job_id}&state=succeeded&page_size=500", token)
    received = get_json(base, f"/demo/receiver/{job_id}/?format=json")
    if runs is None or received is None:
        return set()
    valid = {d["webhook_id"] for d in received["deliveries"] if d["signature_valid"]}
    return {run["id"] for run in runs["results"]} & valid


def create_failing_job(base: str, token: str) -> dict:
    """A job of the owner's own, pointed at the catch-all receiver told to
    answer 500: every run is tried twice, then fails; two failed runs in a
    row pause it."""
    response = requests.post(
        f"{base}/api/v1/jobs/",
        headers={"Authorization": f"Token {token}"},
        json={
            "name": "mine, failing on purpose",
            "interval_seconds": 2,
            "url": f"{base}/demo/receiver/my/own/hook?status=500",
            "max_attempts": 2,
            "retry_backoff_seconds": 1,
            "overlap_policy": "skip",
            "pause_after_failures": 2,
        },
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()


def paused_job(base: str, job_id: str, token: str) -> dict | None:
    job = get_json(base, f"/api/v1/jobs/{job_id}/", token)
    return job if job and job["state"] == "paused" else None


def make_manage(clone: Path, args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "manage", f"ARGS={args}"],
        cwd=clone,
        env=fresh_machine_env(),
        capture_output=True,
        text=True,
        timeout=MANAGE_DEADLINE,
        check=False,
    )


COUNT_JOBS = 'shell -v 0 -c "from jobs.models import Job; print(Job.objects.count())"'


def assert_quiet(out: str) -> None:
    """What a newcomer should not see in `make run`'s output."""
    assert "SECRET_KEY" not in out, "a SECRET_KEY warning"
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert '"GET /' not in out and '"POST /' not in out, "an access log line"
    assert "django.request" not in out, "a switched 500 logged as the server's error"
    assert "make: ***" not in out, "make reported Ctrl-C as an error"


def query(clone: Path, sql: str, *params) -> list[tuple]:
    """``sql`` on the clone's embedded PostgreSQL (var/pg/), while it runs."""
    with psycopg.connect(localdb.database_url(clone / "var" / "pg")) as db:
        return db.execute(sql, params).fetchall()


def stop(run: MakeRun) -> None:
    run.track()
    # make's own group, plus one session per Procfile entry (web, dispatch, work).
    assert len(run.groups) >= 4, f"the process tree was not seen: {run.groups}"
    run.ctrl_c()
    deadline = time.monotonic() + STOP_DEADLINE
    while run.alive() or run.proc.poll() is None:
        if time.monotonic() > deadline:
            left = run.alive()
            run.kill()
            pytest.fail(f"processes left {STOP_DEADLINE}s after Ctrl-C: {left}\n{run.output()}")
        time.sleep(0.2)
    out = run.output()
    assert "SIGKILL" not in out, "honcho had to force-kill a process"
    # Each process ran its own shutdown and exited 0 (the Procfile execs them).
    for name in ("web", "dispatch", "work"):
        assert f"{name}.1 stopped (rc=0)" in out, out[-3000:]
    assert "dispatcher stopped" in out
    assert "worker stopped" in out
    assert "Shutting down: Master" in out
    assert_quiet(out)
    # The embedded PostgreSQL stopped cleanly too (its processes work in the
    # clone, so alive() above waited for them): no pid file is left behind.
    assert not (run.clone / "var" / "pg" / "postmaster.pid").exists()


@pytest.fixture
def clone(tmp_path) -> Path:
    if not port_is_free(PORT):
        pytest.fail(
            "127.0.0.1:8000 is in use: this test runs `make run`, which serves the demo there."
            " Stop whatever listens on port 8000 (ss -ltnp 'sport = :8000') and run it again."
        )
    target = tmp_path / "punctual"
    if os.environ.get("MAKE_RUN_TEST_SOURCE") != "worktree":
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True, timeout=120)
        return target
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_make_run_from_a_fresh_clone_delivers_signed_webhooks_and_stops_on_ctrl_c(clone, tmp_path):
    runs = []
    try:
        first = MakeRun(clone, tmp_path / "make-run-1.log")
        runs.append(first)
        banner = poll(lambda: demo_banner(first), INSTALL_DEADLINE, "the demo banner", first)
        job_id = banner["job"]
        assert "Punctual demo created" in banner["text"]
        # The runtime only, with pip's progress: the development tools come with make test.
        assert "Installing Punctual and its runtime dependencies" in banner["text"]
        assert "Successfully installed" in banner["text"]
        assert (clone / ".venv" / "bin" / "gunicorn").exists()
        assert not (clone / ".venv" / "bin" / "pytest").exists()
        assert not (clone / ".venv" / "bin" / "mkdocs").exists()
        base = first.base

        token = banner["token"]
        delivered = poll(
            lambda: len(found := verified_successes(base, job_id, token)) >= 2 and found,
            DELIVERY_DEADLINE,
            "2 succeeded runs with valid signatures",
            first,
        )
        # The site's root sends a newcomer to the admin, not to a 404.
        root = requests.get(f"{base}/", allow_redirects=False, timeout=5)
        assert (root.status_code, root.headers.get("Location")) == (302, "/admin/"), root.text
        health = requests.get(f"{base}/api/v1/health/", timeout=5)
        assert health.status_code == 200, health.text
        assert health.json()["dispatchers"] == 1 and health.json()["workers"] == 1
        credentials = (clone / "var" / "demo-credentials.txt").read_text()
        assert f"token={token}\n" in credentials
        assert f"password={banner['password']}\n" in credentials

        # The owner's first own job, at the catch-all receiver, failing on purpose.
        mine = create_failing_job(base, token)
        paused = poll(
            lambda: paused_job(base, mine["id"], token),
            PAUSE_DEADLINE,
            "the job to pause itself",
            first,
        )
        assert "after 2 consecutive failed runs" in paused["pause_note"], paused
        failed = get_json(base, f"/api/v1/runs/?job={mine['id']}&state=failed", token)["results"]
        assert len(failed) == 2, failed
        assert {run["last_status_code"] for run in failed} == {500}
        received = get_json(base, "/demo/receiver/?format=json")["deliveries"]
        answered = {d["webhook_id"]: d for d in received if d["job_id"] == mine["id"]}
        for run in failed:
            # Both attempts reached the receiver, verified with the job's own
            # secret though the URL names no job, and were answered 500.
            delivery = answered[run["id"]]
            assert (delivery["signature_valid"], delivery["times_received"]) == (True, 2)
            assert delivery["last_status"] == 500
            assert delivery["last_request"] == "/demo/receiver/my/own/hook?status=500"
        # make manage, beside a running `make run`, uses its server and leaves it up.
        counted = make_manage(clone, COUNT_JOBS)
        assert (counted.returncode, counted.stdout.strip()) == (0, "2"), counted.stderr
        assert (clone / "var" / "pg" / "postmaster.pid").exists()
        stop(first)
        assert port_is_free(PORT)

        # Again, on another port: nothing reset, nothing duplicated,
        # deliveries continue, to the demo receiver where the web app is now.
        second = MakeRun(clone, tmp_path / "make-run-2.log", port=another_free_port())
        runs.append(second)
        again = poll(lambda: demo_banner(second), INSTALL_DEADLINE, "the second banner", second)
        assert "Punctual demo already set up" in again["text"]
        assert (again["job"], again["token"], again["password"]) == (
            job_id,
            banner["token"],
            banner["password"],
        )
        assert again["text"].count(second.base) >= 3, again["text"]  # admin, receiver, health...
        before = len(delivered)
        poll(
            lambda: len(verified_successes(second.base, job_id, token)) > before,
            DELIVERY_DEADLINE,
            "a delivery after the restart",
            second,
        )
        assert query(clone, "SELECT count(*) FROM auth_user") == [(1,)]
        assert query(clone, "SELECT count(*) FROM jobs_job") == [(2,)]
        assert query(clone, "SELECT url FROM jobs_job WHERE id = %s", job_id) == [
            (f"{second.base}/demo/receiver/{job_id}/",)
        ]
        assert query(clone, "SELECT count(*) FROM accounts_apitoken") == [(1,)]
        stop(second)

        # With no server running, make manage starts one for its command and stops it.
        counted = make_manage(clone, COUNT_JOBS)
        assert (counted.returncode, counted.stdout.strip()) == (0, "2"), counted.stderr
        assert not (clone / "var" / "pg" / "postmaster.pid").exists()
    finally:
        for run in runs:
            if run.proc.poll() is None or run.alive():
                print(run.output()[-5000:])
                run.kill()
