"""The outbound-address guard for apprise's own connections
(docs/security.md "Outbound address guard", docs/guides/alerts.md).

apprise talks to a hundred services through ``requests``, ``smtplib`` and
plain sockets, each plugin its own way: no one HTTP session or adapter could
be handed to all of them. So the guard sits below them all: a Python audit
hook (PEP 578) sees every ``socket.connect`` and ``socket.sendto`` of the
process, with the address the socket is about to reach, after any DNS
lookup. On a thread that is sending an alert (``guarded``), an address the
rules refuse (jobs/targets.py ``is_allowed_address``, the same rule as a
webhook's) raises before the connection is opened: a name that resolves to
127.0.0.1, an IP literal, a redirect to an internal host, a rebinding DNS
answer, whatever the plugin. Other threads (the webhook deliveries, the
database) are not checked: the hook returns at once for them.

alerts/sending.py calls the plugin's ``notify`` on the guarded thread itself
(never apprise's own thread pool), so every connection of a send is judged.
A hook cannot be removed once added; it is added once per process, on the
first guarded send.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
import sys
import threading
from collections.abc import Iterator

from jobs.targets import AddressRule, is_allowed_address

_local = threading.local()
_installed = False
_install_lock = threading.Lock()


class RefusedAddressError(OSError):
    """apprise tried to reach an address the rules refuse."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, message)


def _judge(address: object, rule: AddressRule) -> None:
    if isinstance(address, str | bytes):
        # A Unix socket path: nothing apprise needs for a channel.
        _local.refused.append("refused: alert channels may not use local sockets")
        raise RefusedAddressError(_local.refused[-1])
    if not isinstance(address, tuple) or not address:
        return
    try:
        ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
    except ValueError:
        raise RefusedAddressError(f"refused unreadable address {address[0]!r}") from None
    if not is_allowed_address(ip, **rule):
        message = f"refused non-public address {ip}"
        # Kept for the sender: apprise catches the error and logs only that
        # the connection failed.
        _local.refused.append(message)
        raise RefusedAddressError(message)


def _hook(event: str, args: tuple) -> None:
    rule = getattr(_local, "rule", None)
    if rule is None:
        return
    if event == "socket.connect":
        sock, address = args
        if sock.family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
            _judge(address, rule)
    elif event == "socket.sendto":
        sock, address = args
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _judge(address, rule)


def install() -> None:
    global _installed
    with _install_lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True


@contextlib.contextmanager
def guarded(rule: AddressRule) -> Iterator[list[str]]:
    """Judge every connection this thread opens, while inside; yields the
    list of the refusals made."""
    install()
    _local.rule = rule
    _local.refused = []
    try:
        yield _local.refused
    finally:
        _local.rule = None
