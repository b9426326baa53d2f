"""Real processes against the test PostgreSQL database: ``manage.py dispatch``,
``manage.py work`` and the loopback receiver, started as OS processes and
stopped with real signals. Tests wait by polling with a deadline.

With ``PUNCTUAL_TEST_POOLER=pgbouncer`` every process a test starts reaches
the database through a PgBouncer in transaction pooling mode
(tests/pooler.py), and its worker's LISTEN connection goes straight to the
server, as docs/operating/poolers.md prescribes. ``make test-pooler`` runs
that way only the tests marked ``pooler``, where a pooler changes behaviour
(docs/development.md "The pooler pass"). A test marked ``direct_connection``
is skipped in a pooled run, with its reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import requests
from django.db import connection

from tests import pooler
from tests.database import subprocess_database_url
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_env(through: pooler.PgBouncer | None) -> dict[str, str]:
    """The database settings of a process: the test database directly, or
    through ``through``, with the LISTEN connection direct."""
    if through is None:
        return {"DATABASE_URL": subprocess_database_url()}
    return {
        "DATABASE_URL": through.url(),
        "PUNCTUAL_TRANSACTION_POOLER": "true",
        "PUNCTUAL_LISTEN_DATABASE_URL": subprocess_database_url(),
    }


def process_env(through: pooler.PgBouncer | None = None, **extra: str) -> dict[str, str]:
    """The environment of a process a test starts: through ``through``, or
    else through the session's pooler in a pooled run, or else direct."""
    env = dict(os.environ)
    env.update(database_env(through or pooler.serving()))
    env.update(
        SECRET_KEY=os.environ.get("SECRET_KEY", "punctual-test-key"),
        PUNCTUAL_ALLOW_PRIVATE_TARGETS="true",
        PYTHONUNBUFFERED="1",
        PUNCTUAL_LOG_LEVEL="INFO",
    )
    env.update(extra)
    return env


class Processes:
    """Starts processes in their own session and makes sure none outlives the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []

    def start(
        self,
        *args: str,
        env: dict | None = None,
        name: str = "proc",
        wrapper: Sequence[str] = (),
    ) -> subprocess.Popen:
        """``python *args``, run through ``wrapper`` when given (a command
        that execs the rest, such as ``ip netns exec <namespace>``)."""
        log = open(self.tmp_path / f"{name}-{len(self.procs)}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            [*wrapper, sys.executable, *args],
            cwd=ROOT,
            env=env or process_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc.log_path = log.name
        self.procs.append(proc)
        return proc

    def adopt(self, proc: subprocess.Popen, log_path: Path) -> None:
        """A process started elsewhere, logging to ``log_path``: stopped and
        shown like the others."""
        proc.log_path = str(log_path)
        self.procs.append(proc)

    def manage(
        self,
        *args: str,
        env: dict | None = None,
        name: str | None = None,
        wrapper: Sequence[str] = (),
    ):
        return self.start("manage.py", *args, env=env, name=name or args[0], wrapper=wrapper)

    def stop(self, proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if proc.poll() is None:
            proc.send_signal(sig)
        return proc.wait(timeout=timeout)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            # Shown by pytest only when the test failed.
            tail = Path(proc.log_path).read_text(errors="replace").splitlines()[-15:]
            print(f"--- {proc.log_path} (exit {proc.returncode})", *tail, sep="\n")


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup):
    """A PgBouncer in transaction mode in front of the test database, for the
    session; skipped where it is not installed, mandatory under CI=true."""
    reason = pooler.missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    bouncer = pooler.PgBouncer(connection.settings_dict).start()
    yield bouncer
    bouncer.stop()


@pytest.fixture(autouse=True)
def _through_the_pooler(request):
    """In a pooled run, every process test goes through the session's
    PgBouncer, except those that need a direct connection to the server."""
    if not pooler.requested():
        yield
        return
    marker = request.node.get_closest_marker("direct_connection")
    if marker and request.node.get_closest_marker("pooler"):
        # The pooler pass would skip it, and so never run it behind the pooler.
        pytest.fail("marked both pooler and direct_connection: choose one")
    if marker:
        pytest.skip(f"needs a direct connection: {marker.args[0]}")
    pooler.serve(request.getfixturevalue("pgbouncer"))
    yield
    pooler.serve(None)


@pytest.fixture
def processes(tmp_path):
    procs = Processes(tmp_path)
    yield procs
    procs.cleanup()


class ReceiverHandle:
    def __init__(self, proc, port: int, log_path: Path) -> None:
        self.proc, self.port, self.log_path = proc, port, log_path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def stats(self) -> dict:
        return requests.get(self.url("stats"), timeout=5).json()

    def reset_stats(self) -> None:
        requests.post(self.url("stats/reset"), timeout=5)

    def release(self) -> None:
        """Let every delivery to ``/held`` (and any later one) answer 200."""
        requests.post(self.url("release"), timeout=5)

    def flush(self) -> None:
        """Make the receiver write every line it has logged so far (its
        /stats answers after a flush). A receiver that has stopped flushed
        on its way out."""
        with contextlib.suppress(requests.RequestException):
            self.stats()

    def entries(self, event: str = "start") -> list[dict]:
        self.flush()
        if not self.log_path.exists():
            return []
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line being written right now
            if entry.get("event") == event:
                out.append(entry)
        return out


def start_receiver(processes: Processes, tmp_path: Path, name: str = "receiver") -> ReceiverHandle:
    """A loopback receiver process, listening, its log in ``tmp_path``."""
    port_file = tmp_path / f"{name}.port"
    log_path = tmp_path / f"{name}.jsonl"
    proc = processes.start(
        "-m",
        "ops.loopback_receiver",
        "--log",
        str(log_path),
        "--port-file",
        str(port_file),
        name=name,
    )
    wait_until(port_file.exists, timeout=30, message=f"the {name} to listen")
    return ReceiverHandle(proc, int(port_file.read_text()), log_path)


@pytest.fixture
def receiver(processes, tmp_path):
    return start_receiver(processes, tmp_path)
