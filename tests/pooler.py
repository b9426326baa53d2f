"""A PgBouncer in transaction pooling mode in front of the test database, for
the processes that tests start (docs/operating/poolers.md).

``PUNCTUAL_TEST_POOLER=pgbouncer`` runs the process tests with every
process's ``DATABASE_URL`` pointing at one PgBouncer started for the session
(tests/processes/conftest.py); the test code itself keeps its direct
connection. ``make test-pooler`` runs only the tests marked ``pooler`` this
way, those where a pooler changes behaviour (docs/development.md "The pooler
pass").
tests/processes/test_pooler.py starts it in every run.

The pooler is set to expose what a process keeps in its session:
``pool_mode = transaction``, and ``server_round_robin = 1`` so that
consecutive transactions of one client land on different server connections
whenever the pool holds several (with the default, the most recently used
one, a lone client would keep its server connection and hide the fault).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg.rows import dict_row

from scheduler_site import localdb
from tests.polling import wait_until

# The value of PUNCTUAL_TEST_POOLER that routes the process tier through PgBouncer.
PGBOUNCER = "pgbouncer"
PORT = 6432
# Many test processes at once (benchmarks start dozens of workers); each
# transaction borrows one of POOL_SIZE server connections, far fewer than the
# test server's max_connections.
MAX_CLIENTS = 2000
POOL_SIZE = 40


def requested() -> str:
    """The pooler the process tier should go through: '' for none."""
    value = os.environ.get("PUNCTUAL_TEST_POOLER", "")
    if value not in ("", PGBOUNCER):
        raise ValueError(f"PUNCTUAL_TEST_POOLER={value!r}: the only pooler is {PGBOUNCER!r}")
    return value


def binary() -> str | None:
    """Debian's pgbouncer lives in /usr/sbin, which a non-root PATH may lack."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def missing() -> str | None:
    """Why PgBouncer cannot run here, or None."""
    if binary():
        return None
    return "PgBouncer is not installed: `make pgbouncer` installs it (apt-get install pgbouncer)"


def _run_as() -> str | None:
    """PgBouncer refuses to run as root: then it runs as the embedded
    server's system user (which can reach that server's socket), or nobody."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(localdb.SYSTEM_USER)
    except KeyError:
        return "nobody"
    return localdb.SYSTEM_USER


class PgBouncer:
    """One PgBouncer on a Unix socket in a private directory, forwarding every
    database name to the test server, ``auth_type = trust`` towards clients."""

    def __init__(self, server: dict, settings: dict[str, str] | None = None) -> None:
        self.server = dict(server)  # Django's settings_dict of the test database
        self.settings = settings or {}  # more [pgbouncer] settings
        self.user = server["USER"] or localdb.USER
        self.dir = Path(tempfile.mkdtemp(prefix="punctual-pgbouncer-"))
        self.proc: subprocess.Popen | None = None

    def _config(self, run_as: str | None) -> str:
        host = self.server["HOST"] or "127.0.0.1"
        port = self.server["PORT"] or 5432
        lines = [
            "[databases]",
            f"* = host={host} port={port}",
            "[pgbouncer]",
            f"unix_socket_dir = {self.dir}",
            f"listen_port = {PORT}",
            "auth_type = trust",
            f"auth_file = {self.dir / 'userlist.txt'}",
            f"admin_users = {self.user}",
            "pool_mode = transaction",
            "server_round_robin = 1",
            f"max_client_conn = {MAX_CLIENTS}",
            f"default_pool_size = {POOL_SIZE}",
            f"logfile = {self.dir / 'pgbouncer.log'}",
        ]
        lines += [f"{name} = {value}" for name, value in self.settings.items()]
        if run_as:
            lines.append(f"user = {run_as}")
        return "\n".join(lines) + "\n"

    def _write_config(self) -> Path:
        run_as = _run_as()
        password = (self.server["PASSWORD"] or "").replace('"', '""')
        (self.dir / "userlist.txt").write_text(f'"{self.user}" "{password}"\n')
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(self._config(run_as))
        if run_as:
            entry = pwd.getpwnam(run_as)
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        return ini

    def start(self) -> PgBouncer:
        ini = self._write_config()
        self.proc = subprocess.Popen(
            [binary() or "pgbouncer", str(ini)],
            stdout=subprocess.DEVNULL,
            stderr=(self.dir / "stderr.log").open("w"),
            start_new_session=True,
        )
        wait_until(self._answers, timeout=30, message=f"PgBouncer to answer:\n{self.log_tail()}")
        return self

    def _answers(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log_tail()
        try:
            self.admin("SHOW VERSION")
        except psycopg.OperationalError:
            return False
        return True

    def log_tail(self) -> str:
        lines: list[str] = []
        for name in ("stderr.log", "pgbouncer.log"):
            path = self.dir / name
            if path.exists():
                lines += path.read_text(errors="replace").splitlines()[-15:]
        return "\n".join(lines)

    def url(self, name: str | None = None) -> str:
        """A DATABASE_URL for database ``name`` (the test database) through PgBouncer."""
        user, host = quote(self.user, safe=""), quote(str(self.dir), safe="")
        return f"postgres://{user}@{host}:{PORT}/{name or self.server['NAME']}"

    def admin(self, command: str) -> list[dict]:
        """A command on PgBouncer's admin console, which speaks only the
        simple query protocol (psycopg's ClientCursor); its rows as dicts."""
        with psycopg.connect(
            host=str(self.dir),
            port=PORT,
            dbname="pgbouncer",
            user=self.user,
            autocommit=True,
            connect_timeout=5,
            cursor_factory=psycopg.ClientCursor,
            row_factory=dict_row,
        ) as conn:
            cur = conn.execute(command)
            return cur.fetchall() if cur.description else []

    def client_names(self) -> set[str]:
        """The application_name of every client connected now."""
        return {row["application_name"] for row in self.admin("SHOW CLIENTS")}

    def reconnect(self) -> None:
        """Close every server connection (an idle one at once, a busy one when
        released): new ones see database-level settings changed since
        (``ALTER DATABASE … SET``), which a pooled connection never rereads."""
        self.admin("RECONNECT")

    def point_at(self, host: str) -> None:
        """Send every new server connection to ``host`` from now on, as a
        failover manager does when it promotes a standby (Patroni's
        ``on_role_change`` callback, or a virtual IP that moves): the config
        is rewritten and reloaded, and PgBouncer replaces the server
        connections whose address changed."""
        self.server["HOST"] = host
        self._write_config()
        self.admin("RELOAD")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # immediate shutdown
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# The PgBouncer that the process tier of this session goes through, or None.
_serving: PgBouncer | None = None


def serving() -> PgBouncer | None:
    return _serving


def serve(bouncer: PgBouncer | None) -> None:
    global _serving
    _serving = bouncer
