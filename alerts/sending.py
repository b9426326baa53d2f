"""Send one alert through apprise, on the calling thread (dispatch/alert_loop.py
gives each send a thread and a deadline).

1. apprise reads the URL (a channel saved before an apprise upgrade may no
   longer parse: a permanent-looking error, retried like any other).
2. Redirects are never followed (``redirects = False`` on the plugin, and the
   asset's default), and the plugin's socket timeouts are capped below the
   send's deadline.
3. The send runs under the address guard (alerts/guard.py): a connection to
   an address the rules refuse is never opened.
4. apprise reports failures through its log, not exceptions: the warnings it
   logs on this thread are the attempt's error.
"""

from __future__ import annotations

import logging
import threading

import apprise

from alerts import guard
from jobs.targets import AddressRule

_APPRISE_LOGGER = "apprise"


class _ThreadLog(logging.Handler):
    """apprise's warnings, kept per sending thread."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.by_thread: dict[int, list[str]] = {}
        self._lock2 = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        ident = threading.get_ident()
        with self._lock2:
            lines = self.by_thread.get(ident)
            if lines is not None and len(lines) < 20:
                lines.append(record.getMessage())

    def start(self) -> None:
        with self._lock2:
            self.by_thread[threading.get_ident()] = []

    def stop(self) -> list[str]:
        with self._lock2:
            return self.by_thread.pop(threading.get_ident(), [])


_log = _ThreadLog()
_log_lock = threading.Lock()
_log_added = False


def _capture() -> _ThreadLog:
    global _log_added
    with _log_lock:
        if not _log_added:
            logger = logging.getLogger(_APPRISE_LOGGER)
            logger.addHandler(_log)
            if logger.level == logging.NOTSET or logger.level > logging.WARNING:
                logger.setLevel(logging.WARNING)
            _log_added = True
    return _log


def send(url: str, *, title: str, body: str, rule: AddressRule, timeout: float) -> str:
    """Send one notification; returns "" on success, else the error."""
    asset = apprise.AppriseAsset(http_redirects=False)
    plugin = apprise.Apprise.instantiate(url, asset=asset, suppress_exceptions=True)
    if plugin is None:
        return "apprise cannot read this channel's URL"
    plugin.redirects = False
    connect = min(float(plugin.socket_connect_timeout or timeout), timeout / 2)
    plugin.socket_connect_timeout = connect
    plugin.socket_read_timeout = min(float(plugin.socket_read_timeout or timeout), timeout / 2)
    capture = _capture()
    capture.start()
    refused: list[str] = []
    try:
        with guard.guarded(rule) as refused:
            ok = plugin.notify(body=body, title=title)
    except Exception as exc:  # a plugin's bug, or a refusal it did not catch
        ok, lines = False, [str(exc.strerror) if isinstance(exc, OSError) else repr(exc)]
    else:
        lines = []
    lines += capture.stop()
    if ok and not refused:
        return ""
    return "; ".join(refused or lines or ["apprise could not send the notification"])[:2000]
