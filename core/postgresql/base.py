"""Punctual's database backend: Django's PostgreSQL backend, with a health
check that costs no round trip while the connection is sound.

Web processes keep their connection between requests (``CONN_MAX_AGE``), and
``CONN_HEALTH_CHECKS`` has each request's first statement check it first, so
that a connection the server closed since (a restart, a failover) is replaced
rather than failing the request. Django checks by sending ``SELECT 1``: a
round trip on every request, a fifth of a single create's statements (about
0.5 ms of gunicorn's and PostgreSQL's CPU per request, `bench create`).

A server that closes a connection, whether it shuts down, restarts or ends the
backend (``pg_terminate_backend``), sends its error and the end of the stream
on the socket. An idle connection has nothing else to read: libpq has read
every answer up to its last ``ReadyForQuery``. So the socket is polled,
without waiting: nothing to read is a sound connection; anything to read (the
close, or a notice the server sent meanwhile) gets Django's ``SELECT 1``. A
server that vanished without a word (a host powered off) is not seen by
either check before the request's statement waits on it.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        conn = self.connection
        if conn is None or conn.closed or conn.broken:
            return False
        try:
            poll = select.poll()
            poll.register(conn.fileno(), select.POLLIN)
            waiting = poll.poll(0)
        except (OSError, ValueError):  # no socket left
            return False
        return not waiting or super().is_usable()
