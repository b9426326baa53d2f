"""The delivery engine behind ``manage.py work``.

docs/design/guarantees.md: one identity per fire, leases, fencing.

One asyncio event loop keeps up to ``concurrency`` webhook deliveries in
flight through one aiohttp session: thousands of slow receivers cost sockets,
not threads. Every database call runs on one dedicated thread with its own
connection (``self._db``), so the event loop never blocks on SQL, and that
thread naturally batches: while one statement runs, the next batch gathers.

Four loops share the state:

- claim: take as many due runs as there are free slots, in one statement; if
  the batch came back full, claim again at once, otherwise wait for a
  wake-up (dispatch/wakeup.py: a NOTIFY, a timer, or the slow safety poll);
- deliver: one task per run (dispatch/webhooks.py does the HTTP);
- complete: every COMPLETE_EVERY seconds, write all finished results in one
  fenced statement (runs/outcomes.py);
- heartbeat: every lease/3 seconds, extend every held lease in one statement.
  A lease reported lost cancels its delivery: someone else owns the run now.
  A lease this worker could not extend (the database is unreachable: a
  network partition, an outage) lapses by the worker's own clock, a little
  before the database's, and its delivery still in flight is abandoned then:
  once the lease has expired another worker may take the run over, and the
  two must not deliver it at the same time. A delivery that had already
  finished keeps its result, which is written when the database answers
  again, and is dropped there if the run was taken over meanwhile (fencing).

Beside them, on a thread of its own, the alert loop (dispatch/alert_loop.py) sends
the alerts due (docs/guides/alerts.md), so a channel that hangs never holds
up a delivery.

On SIGTERM the worker stops claiming and gives the deliveries in flight
``drain_seconds`` (default: the lease length) to finish. Those still in flight
then are cancelled. It writes the results it has, and releases everything it
still holds: the run is claimable again at once (same run id, so the same
``webhook-id``), its attempt recorded ``interrupted`` and not counted against
``max_attempts``. A shutdown never waits for a delivery's full timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import signal
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import uvloop
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, connections

from core import collector
from dispatch import fleet, webhooks
from dispatch.alert_loop import AlertSender
from dispatch.wakeup import Wakeup
from jobs import crypto, http_options, targets
from runs import leases, outcomes
from runs.after_attempt import after_attempt
from runs.retry import Outcome

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("punctual.worker")

UTC = dt.UTC
COMPLETE_EVERY = 0.02
POLL_INTERVAL = 0.1
# After a failed database call, wait this long before the loop tries again: a
# restarting PostgreSQL should not get 50 connection attempts a second (and
# the log 50 warnings a second) from every worker's completion loop.
DB_RETRY_EVERY = 1.0
BEAT_EVERY = 2.0
MAX_CLAIM = 200
# How often the claim loop asks whether several owners have live webhook jobs
# (the per-owner cap applies only then).
OWNERS_EVERY = 30.0
# How often the claim loop looks for expired leases (leases.CLAIM_EXPIRED)
# before the waiting runs. A busy worker claims many times a second, and the
# look found nothing almost every time, yet cost a tenth of the database's
# CPU at full load (planned and run afresh each time). A dead worker's run
# is taken over at most this much later.
EXPIRED_EVERY = 1.0
# At most this many seconds before the database's expiry, a lease this worker
# could not extend is given up by its own clock (Worker._renewed).
LAPSE_MARGIN = 1.0
# The longest a worker's start waits for the LISTEN connection, and for its
# first name lookup, before its first claim (Worker._prepare).
PREPARE_WITHIN = 2.0


def _not_attempted(outcome: Outcome, error: str) -> webhooks.DeliveryResult:
    """The result of an attempt that never reached the network."""
    return webhooks.DeliveryResult(
        outcome=outcome,
        status_code=None,
        error=error,
        excerpt="",
        duration_ms=0,
        retry_after=None,
        gone=False,
    )


def decide(
    claimed: leases.Claimed,
    result: webhooks.DeliveryResult,
    *,
    started_at: dt.datetime | None,
    now: dt.datetime,
    rng: random.Random,
) -> outcomes.Result:
    """One webhook attempt's outcome, as the result to write (runs/after_attempt.py
    decides the run's next state)."""
    decision = after_attempt(
        result.outcome,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        backoff_seconds=claimed.retry_backoff_seconds,
        now=now,
        rng=rng,
        status_code=result.status_code,
        retry_after=result.retry_after,
        gone=result.gone,
    )
    succeeded = result.outcome is Outcome.SUCCESS
    return outcomes.Result(
        run_id=claimed.run_id,
        job_id=claimed.job_id,
        attempt=claimed.attempt,
        status_code=result.status_code,
        error="" if succeeded else result.error,
        response=result.excerpt,
        started_at=started_at,
        duration_ms=result.duration_ms,
        scheduled_at=claimed.scheduled_at,
        **vars(decision),
    )


@dataclass
class _Held:
    claimed: leases.Claimed
    task: asyncio.Task | None = None
    # When the lease lapses by this worker's clock (event loop time), unless
    # renewed first (_renewed); None until the claim's timer is set.
    lapse_at: float | None = None


class Worker:
    def __init__(
        self,
        *,
        concurrency: int = 500,
        lease_seconds: int = 30,
        name: str | None = None,
        allow_private: bool | None = None,
        poll_interval: float = POLL_INTERVAL,
        drain_seconds: float | None = None,
        owner_share: float | None = None,
        send_alerts: bool = True,
    ) -> None:
        self.concurrency = concurrency
        self.send_alerts = send_alerts
        # The most runs of one owner in flight here at once (docs/design/claims.md):
        # one owner's slow receivers hold at most this many slots, and the
        # rest stay free for everyone else's fires.
        share = settings.PUNCTUAL_OWNER_SHARE if owner_share is None else owner_share
        # It applies while more than one owner has live webhook jobs, which
        # the claim loop checks every OWNERS_EVERY seconds.
        self.owner_cap = max(1, int(concurrency * share))
        self.by_owner: Counter[int | None] = Counter()
        self._several_owners = True
        self._owners_checked = -OWNERS_EVERY
        self._expired_checked = -EXPIRED_EVERY
        self.lease_seconds = lease_seconds
        self.drain_seconds = lease_seconds if drain_seconds is None else drain_seconds
        # How much earlier than the database this worker gives a lease up: room
        # for a late timer on a busy event loop (see _renewed).
        self.lapse_margin = min(LAPSE_MARGIN, lease_seconds / 10)
        self.registration = fleet.Registration("worker", name)
        self.name = self.registration.name
        # Which non-public addresses deliveries may reach (jobs/targets.py):
        # the settings' rule, unless a test says allow_private outright.
        self.address_rule: targets.AddressRule = (
            targets.configured_rule()
            if allow_private is None
            else {"allow_private": allow_private, "allow_loopback": False}
        )
        self.poll_interval = poll_interval
        self.rng = random.Random()
        # Keyed by (run_id, attempt): this worker may claim its own run again
        # (its lease expired while nobody else claimed it), and the two
        # attempts' tasks, results and leases must not be mistaken for each other.
        self.held: dict[tuple[uuid.UUID, int], _Held] = {}
        self.in_flight = 0
        # How many free slots wake a full claim loop (see _deliver).
        self._refill_at = max(1, min(MAX_CLAIM, concurrency // 10))
        self.results: list[outcomes.Result] = []
        self.delivered = 0
        self.stopping = threading.Event()
        self._secrets: dict[tuple, list[str]] = {}
        self._request_options: dict[tuple, tuple[tuple[tuple[str, str], ...], str | None]] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="punctual-db")
        # Both made by run() or run_once() on the event loop, before any delivery.
        self._wake: asyncio.Event | None = None
        self._stopped: asyncio.Event | None = None
        self._session: aiohttp.ClientSession | None = None
        # What the claim loop waits on when there was nothing left to claim.
        self._wakeup = Wakeup(name=self.name, fallback_poll=poll_interval)
        # The garbage collector's settings, once run_forever() has set them
        # (core/collector.py); logged at start-up.
        self._collector: dict[str, object] = {}

    # -- the database thread ------------------------------------------------

    async def _db(self, fn, *args, **kwargs):
        """Run ``fn`` on the dedicated database thread."""

        def call():
            try:
                return fn(*args, **kwargs)
            except DatabaseError:
                # A restarted or unreachable database: drop this thread's
                # connection so the next call opens a fresh one.
                connection.close()
                raise

        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    # -- delivery -------------------------------------------------------------

    def _signing_secrets(self, c: leases.Claimed, now: dt.datetime) -> list[str]:
        # The ciphertexts alone decide the secrets: two jobs sharing one (a
        # copied job) share the decryption too.
        key = (c.secret_encrypted, c.previous_secret_encrypted, c.previous_secret_until)
        secrets = self._secrets.get(key)
        if secrets is None:
            secrets = [crypto.decrypt(c.secret_encrypted)]
            if c.previous_secret_encrypted and c.previous_secret_until:
                secrets.append(crypto.decrypt(c.previous_secret_encrypted))
            if len(self._secrets) > 10_000:
                self._secrets.clear()
            self._secrets[key] = secrets
        if c.previous_secret_until and c.previous_secret_until <= now:
            return secrets[:1]
        return secrets

    def _request_secrets(self, c: leases.Claimed) -> tuple[tuple[tuple[str, str], ...], str | None]:
        """The job's extra headers and its Authorization value, decrypted
        (remembered by ciphertext, as the signing secrets are)."""
        if not c.headers_encrypted and not c.auth_encrypted:
            return (), None
        key = (c.auth_kind, c.auth_encrypted, c.headers_encrypted)
        known = self._request_options.get(key)
        if known is None:
            headers = http_options.unseal(c.headers_encrypted) or {}
            credentials = http_options.unseal(c.auth_encrypted)
            known = (tuple(headers.items()), http_options.authorization(c.auth_kind, credentials))
            if len(self._request_options) > 10_000:
                self._request_options.clear()
            self._request_options[key] = known
        return known

    async def _deliver(self, c: leases.Claimed) -> None:
        now = dt.datetime.now(UTC)
        extra = {"run_id": str(c.run_id), "job_id": str(c.job_id), "attempt": c.attempt}
        try:
            try:
                secrets = self._signing_secrets(c, now)
                headers, authorization = self._request_secrets(c)
            except crypto.SecretUnavailable as exc:
                # Fail closed: never send a webhook unsigned, nor without
                # the headers or credentials its endpoint expects.
                result = _not_attempted(Outcome.PERMANENT, str(exc))
            else:
                delivery = webhooks.Delivery(
                    run_id=str(c.run_id),
                    job_id=str(c.job_id),
                    job_name=c.job_name,
                    scheduled_at=c.scheduled_at,
                    kind=c.kind,
                    attempt=c.attempt,
                    payload=c.payload,
                    url=c.url,
                    secrets=secrets,
                    timeout_seconds=c.timeout_seconds,
                    method=c.method,
                    body_mode=c.body_mode,
                    headers=headers,
                    authorization=authorization,
                )
                assert self._session is not None  # set before any delivery starts
                result = await webhooks.deliver(
                    self._session, delivery, now=now, **self.address_rule
                )
            decided = decide(c, result, started_at=c.attempt_started_at, now=now, rng=self.rng)
            if decided.state != "succeeded":
                log.info("delivery failed", extra={**extra, "error": decided.error[:200]})
            self.results.append(decided)
        except asyncio.CancelledError:
            log.warning("delivery abandoned: lease lost or shutting down", extra=extra)
            raise
        except Exception as exc:
            # A bug or a malformed row must not leave the run held until its
            # deadline: report the attempt as failed, so it is retried.
            log.exception("delivery crashed", extra=extra)
            crashed = _not_attempted(Outcome.RETRYABLE, f"internal error: {type(exc).__name__}")
            self.results.append(
                decide(c, crashed, started_at=c.attempt_started_at, now=now, rng=self.rng)
            )
        finally:
            self.in_flight -= 1
            self.by_owner[c.owner_id] -= 1
            if self.by_owner[c.owner_id] <= 0:
                del self.by_owner[c.owner_id]
            # Wake a claim loop that waits for free slots once enough are free
            # for a worthwhile batch. Waking it on every finished delivery made
            # it claim a run or two per statement, as fast as the database
            # thread could go, starving the completions queued behind it.
            if self.concurrency - self.in_flight == self._refill_at:
                assert self._wake is not None  # set before any delivery starts
                self._wake.set()

    # -- loops ----------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while not self.stopping.is_set():
            free = self.concurrency - self.in_flight
            if free <= 0:
                await self._sleep(self.poll_interval)
                continue
            limit = min(free, MAX_CLAIM)
            sent = asyncio.get_running_loop().time()
            try:
                if sent >= self._owners_checked + OWNERS_EVERY:
                    self._several_owners = await self._db(leases.several_owners)
                    self._owners_checked = sent
                expired = sent >= self._expired_checked + EXPIRED_EVERY
                claimed = await self._db(
                    leases.claim,
                    self.name,
                    limit=limit,
                    lease_seconds=self.lease_seconds,
                    owner_cap=self.owner_cap if self._several_owners else None,
                    held={o: n for o, n in self.by_owner.items() if o is not None},
                    expired=expired,
                    # One owner: no share to keep, so no scan of the owners.
                    fair=self._several_owners,
                )
                if expired:
                    self._expired_checked = sent
            except DatabaseError as exc:
                log.warning("claim failed: database unavailable", extra={"error": str(exc)})
                await self._sleep(DB_RETRY_EVERY)
                continue
            except Exception:
                # A bad row must not stop the worker: log, back off, go on.
                log.exception("claim failed")
                await self._sleep(DB_RETRY_EVERY)
                continue
            for c in claimed:
                self._take(c, sent)
            self._renewed([(c.run_id, c.attempt) for c in claimed], sent)
            if len(claimed) < limit:
                await self._wakeup.wait(self._db)
            elif self.concurrency - self.in_flight < self._refill_at:
                # A full batch, and more due runs: claim again once enough
                # deliveries have ended to free a worthwhile batch (_deliver
                # wakes this loop then), not a run or two per statement as
                # fast as the database thread goes.
                await self._sleep(self.poll_interval)

    def _take(self, c: leases.Claimed, sent: float) -> None:
        """Start delivering a run claimed by a claim sent at ``sent`` (event
        loop time).

        A run this worker already held at the previous attempt was taken over
        by its own claim (the lease expired first): that older attempt is
        stale, its result would be dropped, so its delivery is cancelled.
        """
        older = self._forget((c.run_id, c.attempt - 1))
        if older is not None and older.task and not older.task.done():
            older.task.cancel()
        self.in_flight += 1
        self.by_owner[c.owner_id] += 1
        held = _Held(c)
        self.held[(c.run_id, c.attempt)] = held
        held.task = asyncio.create_task(self._deliver(c))

    def _forget(self, key: tuple[uuid.UUID, int]) -> _Held | None:
        """Stop holding the run ``key`` (its lapse timer then finds it gone)."""
        return self.held.pop(key, None)

    def _renewed(self, keys: list[tuple[uuid.UUID, int]], sent: float) -> None:
        """The database set the leases of ``keys`` to its own now + the lease,
        by one statement sent at ``sent`` (event loop time). Its now came after
        ``sent``, so by this worker's clock each lease runs at least until
        ``sent`` + the lease: they lapse then, less the margin, unless renewed
        again first.

        One timer watches the whole batch, not one per run: a worker claims
        and renews runs by the hundred, and a timer per run was 6 % of a busy
        worker's CPU. A renewal moves each run's ``lapse_at`` on, so the
        older timer finds it changed and leaves it alone."""
        when = sent + self.lease_seconds - self.lapse_margin
        watched = []
        for key in keys:
            held = self.held.get(key)
            if held is not None:
                held.lapse_at = when
                watched.append(key)
        if watched:
            asyncio.get_running_loop().call_at(when, self._lapse_due, watched, when)

    def _lapse_due(self, keys: list[tuple[uuid.UUID, int]], when: float) -> None:
        for key in keys:
            held = self.held.get(key)
            if held is not None and held.lapse_at == when:
                self._lapse(key)

    def _lapse(self, key: tuple[uuid.UUID, int]) -> None:
        """No heartbeat renewed the lease of ``key`` in time (the database did
        not answer): from its expiry on, another worker may claim the run and
        deliver it, so a delivery still in flight is abandoned now. A finished
        one stays held: its result is written when the database answers, and
        applied if nobody took the run over (docs/operating/deployment.md
        "Across a partition")."""
        held = self.held.get(key)
        if held is None or held.task is None or held.task.done():
            return
        self._forget(key)
        log.warning(
            "lease lapsed: the database did not answer; delivery abandoned",
            extra={
                "run_id": str(key[0]),
                "job_id": str(held.claimed.job_id),
                "attempt": key[1],
                "lease_seconds": self.lease_seconds,
            },
        )
        held.task.cancel()

    async def _sleep(self, seconds: float) -> None:
        assert self._wake is not None  # set by run() before the loops start
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _flush(self) -> int:
        if not self.results:
            return 0
        batch, self.results = self.results, []
        try:
            # One transaction: the results, the failure streaks and any
            # automatic pause (runs/outcomes.py) commit or roll back together.
            done = await self._db(outcomes.complete, self.name, batch)
        except Exception as exc:
            # Keep the results and try again: a database error (or a bad row)
            # must neither kill the worker nor lose a result or a pause.
            if isinstance(exc, DatabaseError):
                log.warning("complete failed: database unavailable", extra={"error": str(exc)})
            else:
                log.exception("complete failed")
            self.results = batch + self.results
            await asyncio.sleep(DB_RETRY_EVERY)
            return 0
        for r in batch:
            self._forget((r.run_id, r.attempt))
        self.delivered += len(done.applied)
        self._wakeup.completed(batch)
        return len(batch)

    async def _complete_loop(self) -> None:
        while not self.stopping.is_set() or self.in_flight:
            await asyncio.sleep(COMPLETE_EVERY)
            await self._flush()

    async def _heartbeat_loop(self) -> None:
        lease_every = max(0.2, self.lease_seconds / 3)
        tick = min(lease_every, BEAT_EVERY)
        next_lease = next_beat = 0.0
        while not self.stopping.is_set() or self.in_flight:
            mono = time.monotonic()
            try:
                if mono >= next_lease:
                    next_lease = mono + lease_every
                    await self._beat_leases()
                if mono >= next_beat:
                    next_beat = mono + BEAT_EVERY
                    await self._db(
                        self.registration.beat,
                        in_flight=self.in_flight,
                        stopping=self.stopping.is_set(),
                    )
            except DatabaseError as exc:
                log.warning("heartbeat failed: database unavailable", extra={"error": str(exc)})
            except Exception:
                log.exception("heartbeat failed")
            await asyncio.sleep(tick)

    async def _drain(self) -> None:
        """After stop(), give the deliveries in flight ``drain_seconds``, then
        cancel the rest: their runs stay held, and _shutdown releases them."""
        assert self._stopped is not None  # set by run() before this task starts
        await self._stopped.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_seconds
        while self.in_flight and loop.time() < deadline:
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
        late = [h.task for h in self.held.values() if h.task and not h.task.done()]
        if late:
            log.warning(
                "drain deadline passed: interrupting deliveries",
                extra={"interrupted": len(late), "drain_seconds": self.drain_seconds},
            )
            for task in late:
                task.cancel()

    async def _beat_leases(self) -> None:
        pairs = list(self.held)
        if not pairs:
            return
        scheduled = [self.held[p].claimed.scheduled_at for p in pairs]
        sent = asyncio.get_running_loop().time()
        kept = await self._db(leases.heartbeat, self.name, pairs, scheduled=scheduled)
        self._renewed([p for p in pairs if p[0] in kept], sent)
        for run_id, attempt in pairs:
            if run_id in kept:
                continue
            lost = self._forget((run_id, attempt))
            if lost is not None:
                log.warning(
                    "lease lost",
                    extra={
                        "run_id": str(run_id),
                        "job_id": str(lost.claimed.job_id),
                        "attempt": attempt,
                    },
                )
                if lost.task and not lost.task.done():
                    lost.task.cancel()

    # -- entry points -----------------------------------------------------------

    async def run(self) -> None:
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            # Not the main thread (tests run a worker in a thread):
            # asyncio's loop raises RuntimeError there, uvloop's ValueError.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.stop)
        started = loop.time()
        try:
            await self._prepare()
            log.info(
                "worker started",
                extra={
                    "worker": self.name,
                    "concurrency": self.concurrency,
                    "prepared_seconds": round(loop.time() - started, 3),
                    "listening": self._wakeup.listening,
                    **self._collector,
                },
            )
            await asyncio.gather(
                self._claim_loop(), self._complete_loop(), self._heartbeat_loop(), self._drain()
            )
        finally:
            await self._shutdown()

    async def _prepare(self) -> None:
        """Do everything done once, before the first claim
        (docs/operating/processes.md "Start-up"). A claim starts its lease:
        whatever the first deliveries would pay for once (a session, a first
        connection, a first name lookup, the keys) would come out of that
        lease, and on a busy machine could outlast a short one.

        1. The HTTP session (dispatch/webhooks.py), its connector and the
           resolver that guards its lookups.
        2. The keys of the secrets (jobs/crypto.py).
        3. The database thread and its connection, by the fleet row's first
           beat; a database that does not answer is the claim loop's to
           report and retry.
        4. The LISTEN connection (dispatch/wakeup.py) and a first name
           lookup (``webhooks.prepare_lookups``), side by side, each given at
           most PREPARE_WITHIN seconds: past it the worker claims anyway,
           polling until LISTEN is up, and its first lookup is a delivery's.
        """
        self._session = webhooks.make_session(limit=self.concurrency, **self.address_rule)
        crypto.prepare()
        with contextlib.suppress(DatabaseError):
            await self._db(self.registration.beat)
        self._wakeup.start()
        await asyncio.gather(
            self._wakeup.ready(PREPARE_WITHIN), webhooks.prepare_lookups(PREPARE_WITHIN)
        )

    def stop(self) -> None:
        self.stopping.set()
        self._wakeup.poke()
        if self._wake is not None:
            self._wake.set()
        if self._stopped is not None:
            self._stopped.set()

    async def _shutdown(self) -> None:
        """Write the results, release the rest (the drain already ended or
        cancelled every delivery, unless a loop crashed: cancel them then)."""
        tasks = [h.task for h in self.held.values() if h.task and not h.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await self._flush()
        leftovers = list(self.held)
        try:
            if leftovers:
                n = await self._db(leases.release, self.name, leftovers)
                log.info("released runs at shutdown", extra={"released": n})
            await self._db(self.registration.leave)
        except DatabaseError:
            pass
        await self._wakeup.close()
        if self._session is not None:  # None only when _prepare() failed first
            await self._session.close()
        await self._db(connections.close_all)
        self._executor.shutdown(wait=True)
        log.info("worker stopped", extra={"worker": self.name, "delivered": self.delivered})

    def run_forever(self) -> None:
        close_old_connections()
        self._collector = collector.settle()
        # The alert loop (dispatch/alert_loop.py): a thread of its own with its own
        # database connection, so a channel that hangs never holds up a
        # delivery, a claim or a completion here.
        alerts = AlertSender(self.name, rule=self.address_rule) if self.send_alerts else None
        if alerts is not None:
            alerts.start()
        try:
            # uvloop: the same asyncio API on libuv, with a cheaper loop per
            # socket event and per task; it is most of what a busy worker does.
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(self.run())
        finally:
            if alerts is not None:
                alerts.stop()

    def run_once(self) -> int:
        """Claim one batch, deliver it, write the results; returns runs claimed.

        Synchronous around the deliveries: the database calls run on the
        caller's thread and connection, so tests can use it directly.
        """
        claimed = leases.claim(self.name, limit=self.concurrency, lease_seconds=self.lease_seconds)

        async def deliver_all() -> None:
            self._wake = asyncio.Event()
            self._session = webhooks.make_session(limit=self.concurrency, **self.address_rule)
            try:
                self.in_flight += len(claimed)
                self.by_owner.update(c.owner_id for c in claimed)
                await asyncio.gather(*(self._deliver(c) for c in claimed))
            finally:
                await self._session.close()

        if claimed:
            asyncio.run(deliver_all())
        outcomes.complete(self.name, self.results)
        self.results = []
        return len(claimed)
