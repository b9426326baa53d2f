"""Punctual's database backend: Django's PostgreSQL backend, with a
request's health check that costs no round trip while the connection is
sound.

Web processes keep their connection between requests (``CONN_MAX_AGE``), and
``CONN_HEALTH_CHECKS`` has each request's first statement check it first, so
that a connection the server closed since (a restart, a failover) is replaced
rather than failing the request. Django checks by sending ``SELECT 1``: a
round trip on every request, one of a single create's five.

A server that closes a connection, whether it shuts down, restarts or ends the
backend (``pg_terminate_backend``), sends its error and the end of the stream
on the socket. An idle connection has nothing else to read: libpq has read
every answer up to its last ``ReadyForQuery``. So that check polls the socket,
without waiting: nothing to read is a sound connection; anything to read (the
close, or a notice the server sent meanwhile) gets Django's ``SELECT 1``. A
server that vanished without a word (a host powered off) is not seen by
either check before the request's statement waits on it.

``is_usable()`` itself stays Django's round trip: the loops ask it after a
failed statement whether the database is reachable (dispatch/dispatcher.py
``_database_unreachable``), and behind a pooler only the server's answer
tells: the socket to PgBouncer stays open while the server behind it is gone.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def close_if_health_check_failed(self) -> None:
        # Django's own attributes (CONN_HEALTH_CHECKS, and whether this
        # request checked already), which django-stubs does not declare.
        due = self.health_check_enabled and not self.health_check_done  # type: ignore[attr-defined,has-type]
        if due and self.connection is not None and self._nothing_to_read():
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def _nothing_to_read(self) -> bool:
        conn = self.connection
        if conn.closed or conn.broken:
            return False
        try:
            poll = select.poll()
            poll.register(conn.fileno(), select.POLLIN)
            return not poll.poll(0)
        except (OSError, ValueError):  # no socket left
            return False
