"""Pull claims that wait (``wait_seconds``, docs/guides/pull-worker.md "Waiting claims").

A pull worker's claim with ``wait_seconds`` that finds nothing claimable
waits, up to that long, and claims again as soon as a run may have become
claimable. What wakes it is the NOTIFY that wakes the internal workers
(runs/notify.py: a dispatcher tick, a trigger, a resume, a released run ...,
sent at the commit that made the runs visible). How, in one web process:

1. The first waiting claim starts the process's ``Listener``: a daemon thread
   with ONE dedicated connection (psycopg, autocommit, ``LISTEN``), however
   many requests wait. Every notification sets the ``threading.Event`` of
   every request waiting in the process, which then claims again.
2. A waiting request holds no transaction and takes no connection from anyone:
   each claim is its own short transaction (runs/leases.py ``claim``), and
   between claims the request's thread sleeps on its Event, its own Django
   connection idle, as between two requests.
3. A wake-up is never lost: a request registers its Event before its claim
   and clears it only before claiming, so a NOTIFY that came during a claim
   makes the next wait return at once. When the LISTEN connection comes up
   (again), every waiting request claims once, since notifications sent
   meanwhile were not heard.
4. While the LISTEN connection is down, or with ``PUNCTUAL_LISTEN`` false
   (a transaction pooler without ``PUNCTUAL_LISTEN_DATABASE_URL``: a pooled
   session hears no notification), a waiting request claims every
   ``FALLBACK_POLL`` seconds instead. When listening, it still claims every
   ``PUNCTUAL_POLL_SECONDS`` (the safety poll, as the workers do), for what no
   NOTIFY announces: a retry whose backoff ended, a pull run whose lease
   expired because its worker died.
5. Waits are capped, because each holds one of gunicorn's threads: at most
   ``PUNCTUAL_CLAIM_WAITERS`` per web process, and at most half of them (at
   least one) for one owner. Past a cap the claim is made once, without
   waiting, and if it finds nothing it answers 429 with ``Retry-After``, so
   that waiting workers never take every thread from the admin and the API.
6. The listener closes its connection after ``IDLE_CLOSE`` seconds with no
   request waiting: a web process whose owners never wait keeps no extra
   connection open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TypeVar

import psycopg
from django.conf import settings

from runs.notify import CHANNEL, listen_conninfo

log = logging.getLogger("punctual.api")

T = TypeVar("T")

# Without LISTEN, a waiting request claims this often: a run is answered
# within this, and each waiting request costs the database four small claims
# a second (the cap on waiting requests bounds the total).
FALLBACK_POLL = 0.25
# After the LISTEN connection failed, connect again after this long, doubling
# up to RECONNECT_MAX; the waiting requests poll meanwhile.
RECONNECT_MIN = 0.5
RECONNECT_MAX = 10.0
# With no request waiting for this long, the listener closes its connection.
IDLE_CLOSE = 60.0
# How long the listener blocks reading notifications before it looks at its
# waiters (to close when idle) and the connection's health.
READ_TIMEOUT = 1.0
# Past a cap, the 429's Retry-After.
RETRY_AFTER = 1


class TooManyWaiting(Exception):
    """The process, or the owner in this process, has as many waiting claims
    as allowed."""


class Listener:
    """One web process's LISTEN connection, fanned out to its waiting
    requests (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[threading.Event, int] = {}
        self._per_owner: Counter[int] = Counter()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._idle_since = time.monotonic()
        self._stop = threading.Event()
        # True while the LISTEN connection is up: only then may a request
        # wait the safety poll.
        self.listening = False
        self.notifications = 0

    # -- the requests' side ---------------------------------------------------

    @contextlib.contextmanager
    def waiting(self, owner_id: int) -> Iterator[threading.Event]:
        """Register a waiting request of ``owner_id`` for the block; its Event
        is set on every wake-up. Raises TooManyWaiting past a cap."""
        event = threading.Event()
        self._enter(event, owner_id)
        try:
            yield event
        finally:
            with self._lock:
                del self._waiting[event]
                self._per_owner[owner_id] -= 1
                if self._per_owner[owner_id] <= 0:
                    del self._per_owner[owner_id]
                if not self._waiting:
                    self._idle_since = time.monotonic()

    def _enter(self, event: threading.Event, owner_id: int) -> None:
        cap = settings.PUNCTUAL_CLAIM_WAITERS
        with self._lock:
            if len(self._waiting) >= cap or self._per_owner[owner_id] >= max(1, cap // 2):
                raise TooManyWaiting
            self._waiting[event] = owner_id
            self._per_owner[owner_id] += 1
            if settings.PUNCTUAL_LISTEN and not self._running():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._listen_loop, name="punctual-claim-listener", daemon=True
                )
                self._thread.start()

    def _running(self) -> bool:
        # A forked child inherits the object, not the thread.
        return self._thread is not None and self._thread.is_alive() and self._pid == os.getpid()

    def wake_all(self) -> None:
        with self._lock:
            for event in self._waiting:
                event.set()

    def poll_seconds(self) -> float:
        """How long a waiting request may sleep before it claims again."""
        return settings.PUNCTUAL_POLL_SECONDS if self.listening else FALLBACK_POLL

    # -- the LISTEN connection ------------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        """Close the LISTEN connection now (tests, before their database goes)."""
        thread = self._thread
        self._stop.set()
        if thread is not None:
            thread.join(timeout)
        self._stop.clear()

    def _idle(self) -> bool:
        """True, and the thread ends, when no request has waited for
        IDLE_CLOSE seconds, or when stopped. Decided under the lock, so a
        request that enters at the same time starts a new thread."""
        with self._lock:
            idle = not self._waiting and time.monotonic() - self._idle_since >= IDLE_CLOSE
            if not (idle or self._stop.is_set()):
                return False
            self._thread = None
            return True

    def _listen_loop(self) -> None:
        backoff = RECONNECT_MIN
        conninfo = listen_conninfo(f"punctual-claim-listen {os.getpid()}")
        while True:
            try:
                with psycopg.connect(**conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening = True
                    backoff = RECONNECT_MIN
                    # Runs announced while this connection was down were never heard.
                    self.wake_all()
                    while not self._idle():
                        for _ in conn.notifies(timeout=READ_TIMEOUT):
                            self.notifications += 1
                            self.wake_all()
                    return
            except Exception as exc:  # psycopg.Error, or a bug: either way, poll
                log.warning(
                    "claim wake-up connection failed: waiting claims poll meanwhile",
                    extra={"error": str(exc)[:200], "retry_in": backoff},
                )
            finally:
                self.listening = False
            self.wake_all()  # poll at the fallback rate from now on
            self._stop.wait(backoff)
            backoff = min(RECONNECT_MAX, backoff * 2)
            if self._idle():
                return


LISTENER = Listener()


def claim_waiting(claim: Callable[[], list[T]], *, wait_seconds: int, owner_id: int) -> list[T]:
    """``claim()`` until it takes something or ``wait_seconds`` have passed.

    Without a wait, or past a cap (TooManyWaiting, raised only when the one
    claim found nothing), ``claim()`` is called once."""
    if wait_seconds <= 0:
        return claim()
    deadline = time.monotonic() + wait_seconds
    try:
        with LISTENER.waiting(owner_id) as woken:
            while True:
                woken.clear()
                claimed = claim()
                left = deadline - time.monotonic()
                if claimed or left <= 0:
                    return claimed
                woken.wait(min(left, LISTENER.poll_seconds()))
    except TooManyWaiting:
        claimed = claim()
        if claimed:
            return claimed
        raise
