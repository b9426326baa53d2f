"""Watching the system resolver: every ``socket.getaddrinfo`` call of this
process, in whichever thread makes it, seen through Python's audit hooks
(``sys.addaudithook``), with the state of a database connection at that
moment (``lookups_seen``); or one lookup held back until the test lets it
go (``lookup_held``), to place a request's lookup between two events.
Nothing is replaced: the names resolve as the system resolves them.

A hook cannot be removed once added, so one is added, the first time, and
acts only inside those two.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from django.db.backends.base.base import BaseDatabaseWrapper


@dataclass(frozen=True)
class Lookup:
    host: str
    # Django's view of the connection: inside transaction.atomic().
    in_atomic_block: bool
    # The server's view (libpq's): IDLE, or INTRANS for "idle in transaction".
    transaction_status: str


_watch: tuple[BaseDatabaseWrapper, list[Lookup]] | None = None
# The host whose first lookup is held, the event set when it begins, and the
# event that lets it go on.
_hold: tuple[str, threading.Event, threading.Event] | None = None
_hooked = False


def _hook(event: str, args: tuple) -> None:
    if event != "socket.getaddrinfo":
        return
    host = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
    if _watch is not None:
        conn, seen = _watch
        raw = conn.connection
        status = raw.info.transaction_status.name if raw is not None else "NO CONNECTION"
        seen.append(Lookup(host, conn.in_atomic_block, status))
    hold = _hold
    if hold is not None and hold[0] == host and not hold[1].is_set():
        hold[1].set()
        hold[2].wait(timeout=60)


def _add_hook() -> None:
    global _hooked
    if not _hooked:
        sys.addaudithook(_hook)
        _hooked = True


@contextlib.contextmanager
def lookup_held(host: str, release: threading.Event) -> Iterator[threading.Event]:
    """Hold the first lookup of ``host`` that begins meanwhile, in its
    thread, until ``release`` is set; yield the event set as it begins.
    Later lookups of ``host`` go through."""
    global _hold
    _add_hook()
    began = threading.Event()
    _hold = (host, began, release)
    try:
        yield began
    finally:
        _hold = None
        release.set()


@contextlib.contextmanager
def lookups_seen(conn: BaseDatabaseWrapper) -> Iterator[list[Lookup]]:
    """The lookups made meanwhile, each with the state of ``conn`` as it
    began: the connection of the thread that serves the request, as
    ``connections["default"]`` gives it in that thread (``django.db.connection``
    would be each thread's own)."""
    global _watch
    _add_hook()
    seen: list[Lookup] = []
    _watch = (conn, seen)
    try:
        yield seen
    finally:
        _watch = None
