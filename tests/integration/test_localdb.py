"""The embedded PostgreSQL (scheduler_site/localdb.py): a real server, started,
reused, stopped, and started again after a crash left its pid file behind."""

from __future__ import annotations

import os
import signal

import psycopg
import pytest

from scheduler_site import localdb
from tests.polling import wait_until

# Each test starts a server of its own, with the session's PostgreSQL binaries.
pytestmark = pytest.mark.database_server


def answers(url: str) -> bool:
    with psycopg.connect(url, connect_timeout=5) as conn:
        return conn.execute("SELECT 1").fetchone() == (1,)


def postmaster_pid(data_dir) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


@pytest.fixture
def data_dir(tmp_path):
    path = tmp_path / "pg"
    yield path
    localdb.stop(path, mode="immediate")


def test_start_creates_the_database_and_a_second_start_reuses_the_running_server(data_dir):
    url = localdb.start(data_dir)
    assert url == localdb.database_url(data_dir)
    assert answers(url)
    pid = postmaster_pid(data_dir)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (42)")

    assert localdb.start(data_dir) == url
    assert postmaster_pid(data_dir) == pid, "a running server was started again"

    localdb.stop(data_dir)
    assert not (data_dir / "postmaster.pid").exists()
    localdb.start(data_dir)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT n FROM kept").fetchall() == [(42,)]


def test_a_crashed_server_with_a_stale_pid_file_starts_again(data_dir):
    url = localdb.start(data_dir)
    pid = postmaster_pid(data_dir)
    os.kill(pid, signal.SIGKILL)  # as a crash, or a killed `make run`, would

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, timeout=30, message="the postmaster to die")
    assert (data_dir / "postmaster.pid").exists(), "the crash should leave its pid file"
    localdb.start(data_dir)
    assert postmaster_pid(data_dir) != pid
    wait_until(lambda: answers(url), timeout=60, message="the restarted server to answer")


def test_the_server_listens_on_its_socket_only(data_dir):
    localdb.start(data_dir)
    with psycopg.connect(localdb.database_url(data_dir)) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        assert conn.execute("SHOW unix_socket_directories").fetchone() == (str(data_dir),)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_as_root_stop_works_after_a_parent_directory_became_private_again(tmp_path):
    # pytest itself resets its temporary root to 0700 when a new session starts;
    # `make run` in such a checkout must still stop its server on Ctrl-C.
    private = tmp_path / "private"
    private.mkdir()
    data_dir = private / "pg"
    try:
        localdb.start(data_dir)
        private.chmod(0o700)
        localdb.stop(data_dir)
        assert not (data_dir / "postmaster.pid").exists()
    finally:
        localdb.stop(data_dir, mode="immediate")
