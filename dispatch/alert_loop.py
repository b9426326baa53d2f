"""The worker's alert loop (docs/guides/alerts.md "Delivery").

It runs on a thread of its own in every ``manage.py work`` process, with its
own database connection: it never runs on the webhook deliveries' event loop
or their database thread, so a channel that hangs or fails costs the
deliveries nothing.

Each pass (``run_once``):

1. Every ``INSTALL_EVERY`` seconds, check the install's health the way
   ``/api/v1/health/`` does (dispatch/backlog.py, dispatch/fleet.py): no dispatcher seen, or the
   oldest claimable run waiting past ``PUNCTUAL_BACKLOG_DEGRADED_SECONDS``
   records an install event for the superusers' channels. Every worker
   checks; the quiet period folds the repeats.
2. Claim up to ``batch`` due alerts (alerts/ledger.py), each with a lease
   longer than a send's deadline.
3. Send each on a thread of its own, under the address guard, all at once,
   and wait at most ``PUNCTUAL_ALERT_SEND_SECONDS`` for them. A send still
   running then is abandoned (its socket timeouts end its thread soon after)
   and counted as a failed attempt.
4. Write the results, fenced on the lease (ledger.complete): a retry with
   backoff, or ``failed`` once the attempts are spent.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from alerts import events, ledger, messages, sending
from core.db import db_now
from dispatch import backlog, fleet
from jobs import crypto, targets

log = logging.getLogger("punctual.alerts")

INSTALL_EVERY = 30.0
IDLE_WAIT = 1.0
BATCH = 20
# Sends abandoned past their deadline whose threads still run: past this
# many, no new alert is claimed until some end (each ends by its socket
# timeouts), so a channel that hangs cannot pile up threads.
MAX_ABANDONED = 50


class AlertSender:
    def __init__(
        self,
        name: str,
        *,
        rule: targets.AddressRule | None = None,
        batch: int = BATCH,
        install_every: float = INSTALL_EVERY,
    ) -> None:
        self.name = name
        self.rule = rule if rule is not None else targets.configured_rule()
        self.batch = batch
        self.install_every = install_every
        self.deadline = settings.PUNCTUAL_ALERT_SEND_SECONDS
        # Longer than a send may take, with room for the writes around it:
        # a live worker never loses an alert's lease mid-send, so the loop
        # needs no heartbeat.
        self.lease_seconds = self.deadline * 2 + 5
        self.rng = random.Random()
        self.stopping = threading.Event()
        self.sent = 0
        self.failed = 0
        self._abandoned: list[threading.Thread] = []
        self._install_checked = -install_every
        self._thread: threading.Thread | None = None

    # -- one pass ---------------------------------------------------------------

    def run_once(self) -> int:
        """One pass; returns how many alerts it attempted."""
        self._check_install()
        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        if len(self._abandoned) >= MAX_ABANDONED:
            return 0
        claimed = ledger.claim(self.name, limit=self.batch, lease_seconds=self.lease_seconds)
        if not claimed:
            return 0
        results = self._send_all(claimed)
        written = ledger.complete(self.name, results, rng=self.rng)
        for r in results:
            state = written.get(r.id)
            if state == "sent":
                self.sent += 1
            elif state is not None:
                self.failed += 1
                log.warning(
                    "alert not sent",
                    extra={
                        "alert_id": r.id,
                        "attempt": r.attempt,
                        "state": state,
                        "error": r.error[:200],
                    },
                )
        return len(claimed)

    def _check_install(self) -> None:
        mono = time.monotonic()
        if mono < self._install_checked + self.install_every:
            return
        self._install_checked = mono
        now = db_now()
        if not fleet.alive("dispatcher", now).exists():
            window = int(fleet.ALIVE_WITHIN.total_seconds())
            events.record_install("no_dispatcher", f"no dispatcher seen within {window} s", now)
        if reason := backlog.backlog_reason(backlog.backlog_seconds(now)):
            events.record_install("workers_behind", reason, now)

    def _send_all(self, claimed: list[ledger.Claimed]) -> list[ledger.Sent]:
        """Send every claimed alert on a thread of its own, all within one
        deadline."""
        cap = settings.PUNCTUAL_ALERT_MAX_ATTEMPTS
        results: dict[int, ledger.Sent] = {}
        threads = []
        for c in claimed:
            if c.attempt > cap:
                # Taken over from a worker that died on its last attempt.
                results[c.id] = ledger.Sent(
                    c.id, c.attempt, ok=False, error="lease expired on the last attempt"
                )
                continue
            thread = threading.Thread(
                target=self._send_one, args=(c, results), name=f"alert {c.id}", daemon=True
            )
            thread.start()
            threads.append((c, thread))
        end = time.monotonic() + self.deadline
        for c, thread in threads:
            thread.join(max(0.0, end - time.monotonic()))
            if thread.is_alive():
                self._abandoned.append(thread)
                results.setdefault(
                    c.id,
                    ledger.Sent(
                        c.id, c.attempt, ok=False, error=f"timed out after {self.deadline:g} s"
                    ),
                )
        return [results[c.id] for c in claimed if c.id in results]

    def _send_one(self, c: ledger.Claimed, results: dict[int, ledger.Sent]) -> None:
        try:
            url = crypto.decrypt(c.url_encrypted)
        except crypto.SecretUnavailable:
            results[c.id] = ledger.Sent(
                c.id, c.attempt, ok=False, error="cannot decrypt the channel's URL"
            )
            return
        title, body = messages.render(
            kind=c.kind,
            count=c.count,
            detail=c.detail,
            job_name=c.job_name,
            channel_name=c.channel_name,
            due_at=c.due_at,
        )
        error = sending.send(url, title=title, body=body, rule=self.rule, timeout=self.deadline)
        # setdefault: a send that ends after its deadline keeps the timeout.
        results.setdefault(c.id, ledger.Sent(c.id, c.attempt, ok=not error, error=error))

    # -- the thread ---------------------------------------------------------------

    def run_forever(self) -> None:
        close_old_connections()
        try:
            while not self.stopping.is_set():
                try:
                    busy = self.run_once()
                except DatabaseError as exc:
                    log.warning("alert loop: database unavailable", extra={"error": str(exc)})
                    connection.close()
                    busy = 0
                except Exception:
                    log.exception("alert loop failed")
                    busy = 0
                if not busy:
                    self.stopping.wait(IDLE_WAIT)
        finally:
            connection.close()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.run_forever, name="punctual-alerts", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the pass in progress (at most one send deadline)."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(self.deadline + 5 if timeout is None else timeout)
