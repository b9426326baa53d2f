"""Saving jobs against a DNS server that never answers (docs/security.md
"Host lookups when a job is saved"): real gunicorn, one process with four
threads, in a network namespace of its own whose only nameserver swallows
every query (tests/black_hole_dns.py). Nothing in Punctual is replaced: the
lookups are the system resolver's own, and they really hang.

One owner posts a bulk create of 1,000 jobs on 1,000 distinct host names,
with an ``Idempotency-Key``. It is answered 400 within the lookups' 2 s
deadline (plus a margin for a busy machine), each item refused in words that
name its host; meanwhile the health check answers in under a second each
time it is asked, and the web process's database connection is never ``idle
in transaction``. Another owner's save then gets its own lookup at once,
although the first owner's lookups still hang; and a second such list from
the first owner does not add a thread: the threads stuck in lookups stay
within the first owner's share.

gunicorn listens on a Unix socket and reaches the database over the
server's Unix socket: the namespace has no network to anything outside.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from accounts import tokens
from jobs.lookups import LOOKUPS_PER_OWNER
from jobs.models import IdempotencyKey, Job
from tests.black_hole_dns import black_hole_wrapper
from tests.database import subprocess_database_url
from tests.processes.conftest import process_env, wait_until

pytestmark = [
    pytest.mark.processes,
    pytest.mark.django_db(transaction=True),
    pytest.mark.direct_connection(
        "gunicorn runs in a network namespace of its own and reaches the server over its"
        " Unix socket"
    ),
]

DEADLINE = 2.0  # PUNCTUAL_TARGET_LOOKUP_SECONDS's default, left as it is
# Beyond the deadline, for reading and validating 1,000 items on a busy machine.
MARGIN = 10.0
HEALTH_LIMIT = 1.0
THREADS = 4
NAMES = 1000
APPLICATION = "web-black-hole-dns"


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class Web:
    """gunicorn on a Unix socket: each request on a connection of its own."""

    def __init__(self, path: str) -> None:
        self.path = path

    def request(
        self,
        method: str,
        url: str,
        body=None,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> tuple[int, object, float]:
        """The status, the body (JSON when it is) and the seconds it took."""
        headers = dict(headers or {})
        if body is not None:
            headers["Content-Type"] = "application/json"
        if token:
            headers["Authorization"] = f"Token {token}"
        conn = UnixHTTPConnection(self.path, timeout)
        started = time.monotonic()
        try:
            conn.request(method, url, json.dumps(body) if body is not None else None, headers)
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        elapsed = time.monotonic() - started
        try:
            data = json.loads(raw)
        except ValueError:
            data = raw.decode(errors="replace")
        return response.status, data, elapsed


def missing() -> str | None:
    """Why the scenario cannot run here, or None."""
    _, reason = black_hole_wrapper()
    if reason:
        return reason
    if not (connection.settings_dict["HOST"] or "").startswith("/"):
        return "the test database is not on a Unix socket, which a network namespace can reach"
    return None


@pytest.fixture
def web(processes):
    reason = missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    wrapper, _ = black_hole_wrapper()
    # A short directory: a Unix socket's path is at most 107 bytes.
    place = Path(tempfile.mkdtemp(prefix="punctual-dns-"))
    url = subprocess_database_url()
    separator = "&" if "?" in url else "?"
    env = process_env(
        DJANGO_SETTINGS_MODULE="scheduler_site.settings",
        DEBUG="false",
        DATABASE_URL=f"{url}{separator}application_name={quote(APPLICATION)}",
        PUNCTUAL_ALLOW_PRIVATE_TARGETS="false",
        PUNCTUAL_MAX_TARGET_HOSTS=str(NAMES),
    )
    sock = str(place / "web.sock")
    master = processes.start(
        "-m", "tests.black_hole_dns", "--resolv-conf", str(place / "resolv.conf"), "--",
        "-m", "gunicorn", "scheduler_site.wsgi", "--bind", f"unix:{sock}",
        "--workers", "1", "--threads", str(THREADS), "--graceful-timeout", "4",
        env=env, name="gunicorn", wrapper=wrapper,
    )  # fmt: skip
    site = Web(sock)

    def answers() -> bool:
        assert master.poll() is None, "gunicorn exited"
        try:
            return site.request("GET", "/api/v1/health/")[0] in (200, 503)
        except OSError:
            return False  # not listening yet

    wait_until(answers, timeout=120, message="gunicorn answering in its namespace")
    site.master = master  # type: ignore[attr-defined]
    yield site
    shutil.rmtree(place, ignore_errors=True)


def owner_key(name: str) -> str:
    owner = get_user_model().objects.create_user(name, is_staff=True)
    return tokens.issue(owner)[1]


def jobs_on_names(prefix: str) -> list[dict]:
    return [
        {
            "name": f"{prefix}-{i}",
            "interval_seconds": 60,
            "url": f"https://h{i:04}.{prefix}.never-answers.example/hook",
        }
        for i in range(NAMES)
    ]


def idle_in_transaction() -> int:
    with connection.cursor() as cur:
        cur.execute(
            # Another xdist worker's gunicorn may carry the same name.
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND state LIKE 'idle in transaction%%'",
            [APPLICATION],
        )
        return cur.fetchone()[0]


def worker_threads(master_pid: int) -> int:
    """The threads of gunicorn's one worker process (the master's child)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if fields.get("PPid", "").strip() == str(master_pid):
            return int(fields["Threads"])
    raise AssertionError("gunicorn's worker process not found")


def test_a_thousand_names_that_never_resolve_are_refused_within_the_deadline(web):
    mallory, alice = owner_key("mallory"), owner_key("alice")
    body = jobs_on_names("m")
    answer: dict[str, object] = {}

    def post_the_list() -> None:
        try:
            answer["reply"] = web.request(
                "POST",
                "/api/v1/jobs/",
                body,
                token=mallory,
                # Its transaction is where a connection would wait.
                headers={"Idempotency-Key": "the-list"},
                timeout=DEADLINE + MARGIN,
            )
        except TimeoutError:
            answer["reply"] = None

    poster = threading.Thread(target=post_the_list)
    started = time.monotonic()
    poster.start()
    health_times, idle_seen = [], 0
    while poster.is_alive():
        health_times.append(web.request("GET", "/api/v1/health/", timeout=30)[2])
        idle_seen = max(idle_seen, idle_in_transaction())
    poster.join()
    elapsed = time.monotonic() - started

    print(
        f"the list answered after {elapsed:.2f} s; {len(health_times)} health checks meanwhile,"
        f" the slowest {max(health_times, default=0):.3f} s; connections seen idle in"
        f" transaction: {idle_seen}"
    )
    reply = answer["reply"]
    assert reply is not None, f"no answer within {DEADLINE + MARGIN:g} s"
    status, errors, _ = reply
    assert status == 400, errors
    assert isinstance(errors, dict) and len(errors) == NAMES
    for index in (0, 17, NAMES - 1):
        host = f"h{index:04}.m.never-answers.example"
        assert errors[str(index)] == {
            "url": [f"could not resolve {host} within {DEADLINE:g} s; try again"]
        }
    assert elapsed <= DEADLINE + MARGIN
    assert idle_seen == 0, "a connection sat idle in transaction while names were looked up"
    assert health_times, "no health check was answered meanwhile"
    assert max(health_times) < HEALTH_LIMIT, health_times
    assert not Job.objects.exists() and not IdempotencyKey.objects.exists()

    # Mallory's lookups still hang, in threads of their own: another owner's
    # name gets a thread at once (localhost is in /etc/hosts: no DNS).
    status, errors, _ = web.request(
        "POST",
        "/api/v1/jobs/",
        {"name": "a", "interval_seconds": 60, "url": "http://localhost:9/hook"},
        token=alice,
    )
    assert status == 400
    assert "resolves to a non-public address" in errors["url"][0], errors

    # The same list again: refused in time again, and not one more thread.
    status, errors, elapsed = web.request(
        "POST", "/api/v1/jobs/", jobs_on_names("n"), token=mallory, timeout=DEADLINE + MARGIN
    )
    assert status == 400 and len(errors) == NAMES
    assert elapsed <= DEADLINE + MARGIN
    # The worker's main thread, its request threads, and Mallory's share of
    # the lookup threads, all of them stuck.
    threads = worker_threads(web.master.pid)
    print(f"the second list answered after {elapsed:.2f} s; the worker has {threads} threads")
    assert threads <= 1 + THREADS + LOOKUPS_PER_OWNER
