"""When an idle worker claims again (docs/operating/processes.md "Wake-ups").

A worker whose last claim came back short has nothing to do until a run
becomes claimable. Polling the claim query for that costs every idle worker
ten queries a second; instead the worker's claim loop awaits ``Wakeup.wait()``,
which returns when

- a NOTIFY arrives on ``punctual_runs`` (runs/notify.py): a dispatcher tick,
  a manual trigger, a backfill, a resume, an operator's retry, a retry due at
  once or a run released at shutdown committed;
- the worker itself pokes it: it is stopping, or it wrote results (a finished
  run may let the next run of a ``skip``/``queue`` job start);
- a timer the worker set is due: each retry it wrote with a backoff is
  claimable at a time it knows, so it claims then; and, since a worker that
  dies announces nothing, an idle worker asks when the earliest lease of a
  running run may expire (runs/leases.py NEXT_LEASE_EXPIRY), and claims then,
  asking again once that time has come;
- the safety poll expires (``PUNCTUAL_POLL_SECONDS``, 5 s by default): it
  finds what nothing announced, such as a jittered run whose dispatcher died,
  or a retry whose worker is gone.

The notifications come over one dedicated connection per worker process
(psycopg, autocommit, ``LISTEN``), separate from the Django connection its
claims use, and read on the event loop. While that connection is down the
worker polls every ``fallback_poll`` seconds (100 ms) as it did before LISTEN,
and reconnects with a backoff; after a reconnect it claims once, since
notifications sent meanwhile were lost. A transaction pooler (PgBouncer
``pool_mode=transaction``) does not deliver notifications to a session, so
behind one the LISTEN connection goes straight to the server
(``PUNCTUAL_LISTEN_DATABASE_URL``), or ``PUNCTUAL_LISTEN=false`` turns LISTEN
off and the worker polls every ``fallback_poll`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Iterable

import psycopg
from django.conf import settings

from runs import leases
from runs.notify import CHANNEL, listen_conninfo
from runs.outcomes import Result

log = logging.getLogger("punctual.worker")

# After the LISTEN connection failed, wait this long before connecting again,
# doubling up to RECONNECT_MAX: a restarting PostgreSQL gets one attempt per
# worker every few seconds, while the worker polls meanwhile.
RECONNECT_MIN = 0.5
RECONNECT_MAX = 10.0


class Wakeup:
    """What an idle claim loop waits on; made by the worker, started on its
    event loop."""

    def __init__(
        self,
        *,
        name: str,
        fallback_poll: float,
        listen: bool | None = None,
        safety_poll: float | None = None,
    ) -> None:
        self.name = name
        self.listen = settings.PUNCTUAL_LISTEN if listen is None else listen
        self.safety_poll = settings.PUNCTUAL_POLL_SECONDS if safety_poll is None else safety_poll
        self.fallback_poll = fallback_poll
        # True while the LISTEN connection is up: only then may the worker
        # wait the long safety poll.
        self.listening = False
        self.notifications = 0
        self._event: asyncio.Event | None = None
        # Set once the first LISTEN attempt has ended, connected or not.
        self._tried: asyncio.Event | None = None
        self._timers: list[float] = []  # monotonic instants, a heap
        # The last (or the pending) claim for finished runs, see completed().
        self._completion_wake = float("-inf")
        # When to ask again when the next lease may expire (monotonic).
        self._lease_check = float("-inf")
        self._task: asyncio.Task | None = None
        # Read here, on the worker's thread: Django's connection is per thread.
        self._conninfo = listen_conninfo(f"punctual-listen {name}") if self.listen else {}

    # -- the claim loop's side ------------------------------------------------

    def start(self) -> None:
        """On the worker's event loop, before the claim loop first waits."""
        self._event = asyncio.Event()
        self._tried = asyncio.Event()
        if self.listen:
            self._task = asyncio.create_task(self._listen_loop())

    async def ready(self, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until the LISTEN connection is
        up or its first attempt has failed (the worker polls meanwhile):
        the worker connects before its first claim, not beside its first
        deliveries."""
        if self._task is None or self._tried is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._tried.wait(), timeout)

    async def wait(self, db=None) -> None:
        """Wait until a run may have become claimable. A wake-up that came
        while the worker was claiming is kept, so the next wait returns at
        once: a notification is never lost between a claim and this wait.

        ``db`` runs a function on the worker's database thread; with it, a
        listening worker keeps a timer for the next lease expiry."""
        assert self._event is not None  # set by start()
        if db is not None and self.listening and time.monotonic() >= self._lease_check:
            await self._watch_leases(db)
        now = time.monotonic()
        poll = self.safety_poll if self.listening else self.fallback_poll
        timeout = min(poll, self._timers[0] - now) if self._timers else poll
        if timeout > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()
        now = time.monotonic()
        while self._timers and self._timers[0] <= now:
            heapq.heappop(self._timers)

    async def _watch_leases(self, db) -> None:
        try:
            seconds = await db(leases.seconds_to_next_lease_expiry)
        except Exception:
            seconds = None  # the claim reports the database's trouble
        now = time.monotonic()
        if seconds is None:
            self._lease_check = now  # nothing running: ask at the next wait
        elif seconds > 0:
            self._lease_check = now + seconds
            self.wake_in(seconds + 0.01)
        else:
            # Expired, yet the claim did not take it (another claim holds
            # it, or its job was just paused): look again in a second.
            self._lease_check = now + 1.0
            self.wake_in(1.0)

    def poke(self) -> None:
        """Claim again now (stopping, or something this worker did)."""
        if self._event is not None:
            self._event.set()

    def wake_in(self, seconds: float) -> None:
        """Claim again ``seconds`` from now."""
        heapq.heappush(self._timers, time.monotonic() + max(0.0, seconds))
        if len(self._timers) > 10_000:  # a flood of retries: the poll still runs
            self._timers = heapq.nsmallest(1000, self._timers)

    def completed(self, results: Iterable[Result]) -> None:
        """After this worker wrote ``results``: a finished run can let the next
        run of its job start, and a retry is claimable after its backoff.

        The claims for finished runs are coalesced to one per
        ``fallback_poll``, the pace at which a partly busy worker claimed
        before: a claim after every 20 ms batch of results would compete
        with the completions for the database thread."""
        for r in results:
            if r.state == "retrying" and r.retry_in > 0:
                # A little late rather than early: a claim before the
                # database's available_at would find nothing.
                self.wake_in(r.retry_in + 0.01)
        now = time.monotonic()
        if now >= self._completion_wake + self.fallback_poll:
            self._completion_wake = now
            self.poke()
        elif self._completion_wake <= now:  # none pending: one when the pace allows
            self._completion_wake += self.fallback_poll
            self.wake_in(self._completion_wake - now)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    # -- the LISTEN connection ------------------------------------------------

    def _tried_once(self) -> None:
        if self._tried is not None:
            self._tried.set()

    async def _listen_loop(self) -> None:
        backoff = RECONNECT_MIN
        while True:
            conn = None
            try:
                conn = await psycopg.AsyncConnection.connect(**self._conninfo, autocommit=True)
                await conn.execute(f"LISTEN {CHANNEL}")
                self.listening = True
                self._tried_once()
                backoff = RECONNECT_MIN
                log.info("listening for wake-ups", extra={"channel": CHANNEL})
                # Runs announced while this connection was down were never heard.
                self.poke()
                async for _ in conn.notifies():
                    self.notifications += 1
                    self.poke()
                raise psycopg.OperationalError("notification stream ended")
            except Exception as exc:  # psycopg.Error, or a bug: either way, poll
                if self.listening:
                    log.warning(
                        "wake-up connection lost: polling until it is back",
                        extra={"error": str(exc)[:200]},
                    )
                else:
                    log.warning(
                        "wake-up connection failed: polling meanwhile",
                        extra={"error": str(exc)[:200], "retry_in": backoff},
                    )
            finally:
                self.listening = False
                self._tried_once()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            # Poll at the fallback rate from now on, not after the safety poll.
            self.poke()
            await asyncio.sleep(backoff)
            backoff = min(RECONNECT_MAX, backoff * 2)
