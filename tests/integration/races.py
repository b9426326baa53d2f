"""Two live connections in one test: a thread with its own Django connection,
and a way to see that it waits for a row lock. The interleavings are forced
with events and lock waits, never with sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection, connections

from tests.polling import wait_until


class Other(threading.Thread):
    """Runs ``fn`` on its own database connection; ``result()`` re-raises what
    it raised. ``pid`` is its PostgreSQL backend, known once ``ready`` is set."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.pid: int | None = None
        self.ready = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                self.pid = cur.fetchone()[0]
            self.ready.set()
            self.value = self.fn()
        except BaseException as exc:  # handed to the test by result()
            self.error = exc
        finally:
            self.ready.set()
            connection.close()

    def result(self, timeout: float = 30.0) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "the other connection did not finish"
        if self.error is not None:
            raise self.error
        return self.value


def start(fn: Callable[[], Any]) -> Other:
    other = Other(fn)
    other.start()
    other.ready.wait(30)
    return other


def waits_for_a_lock(pid: int | None) -> bool:
    with connections["default"].cursor() as cur:
        cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cur.fetchone()
    return bool(row) and row[0] == "Lock"


def wait_until_blocked_or_done(other: Other, what: str) -> None:
    """Wait until ``other`` waits for a row lock this test holds, or finished."""
    wait_until(
        lambda: not other.is_alive() or waits_for_a_lock(other.pid),
        message=f"{what} to wait for the row lock or finish",
    )
