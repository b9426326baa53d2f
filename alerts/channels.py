"""An alert channel's apprise URL: is it one apprise can send to, which
hosts does it name, how is it shown (docs/guides/alerts.md "Channels").

A channel is an outbound request like a webhook, so the outbound-address rules
(jobs/targets.py) apply to it. At save, the hosts the URL names (for the
schemes that take a host: ``json://``, ``mailto://``, ``ntfy://`` and the
like, not the hosted services whose "host" is a token) are looked up before
any transaction (jobs/lookups.py) and judged by ``targets.check_url``. At
send, every connection apprise opens is judged again (alerts/guard.py).
"""

from __future__ import annotations

import functools
import ipaddress
import urllib.parse
from collections.abc import Callable

import apprise

from jobs import targets
from jobs.targets import UnsafeTargetError

MAX_URL_LENGTH = 2000


class BadChannelURL(ValueError):
    """A URL apprise cannot send to, or one the address rules refuse. The
    message is shown to the owner and never contains the URL."""


def instantiate(url: str):
    """The apprise plugin for ``url``, or ``BadChannelURL``."""
    if not isinstance(url, str) or not url.strip():
        raise BadChannelURL("An apprise URL is required.")
    if len(url) > MAX_URL_LENGTH:
        raise BadChannelURL(f"The URL is longer than {MAX_URL_LENGTH} characters.")
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if not scheme:
        raise BadChannelURL("Not an apprise URL: it must start with a scheme, e.g. json://.")
    if scheme not in _schemes():
        raise BadChannelURL(f"Unknown apprise scheme {scheme}://.")
    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if plugin is None:
        raise BadChannelURL(
            f"apprise cannot read this {scheme}:// URL; see the apprise documentation for its form."
        )
    return plugin


@functools.cache
def _schemes() -> frozenset[str]:
    """Every scheme this install's apprise knows (read once: it is slow)."""
    schemes: set[str] = set()
    for service in apprise.Apprise().details()["schemas"]:
        for key in ("protocols", "secure_protocols"):
            value = service.get(key) or ()
            schemes.update([value] if isinstance(value, str) else value)
    return frozenset(schemes)


def hosts(plugin) -> list[str]:
    """The hosts a plugin connects to that its URL chose: the ``host`` of the
    schemes that take one, and an e-mail plugin's SMTP server. A hosted
    service (Slack, Telegram…) connects to its own fixed host, and the
    "host" of its URL is a token, not a name: it is not looked up (the send
    is still guarded, alerts/guard.py)."""
    found = []
    # The SMTP server first: it is where an e-mail plugin connects.
    smtp = getattr(plugin, "smtp_host", None)
    if smtp:
        found.append(smtp)
    host = getattr(plugin, "host", None)
    if "host" in getattr(plugin, "template_tokens", {}) and host and host not in found:
        found.append(host)
    return found


def _as_http(host: str) -> str:
    """A stand-in http URL for ``host``, to judge it by the webhook rules."""
    literal = targets.ip_literal(host)
    if isinstance(literal, ipaddress.IPv6Address):
        return f"http://[{literal}]/"
    return f"http://{host}/"


def stand_in_urls(url: object) -> list[str]:
    """The stand-in URLs of a channel URL's hosts, for jobs/lookups.py to look
    up before the save's transaction; [] for a URL apprise cannot read."""
    try:
        plugin = instantiate(url)  # type: ignore[arg-type]
    except BadChannelURL:
        return []
    return [_as_http(h) for h in hosts(plugin)]


def check(url: str, *, resolve: Callable[[str], list[str]] | None = None) -> None:
    """The save-time check: apprise reads the URL, and every host it names
    passes the outbound-address rules (``resolve``: jobs/lookups.py answers)."""
    plugin = instantiate(url)
    for host in hosts(plugin):
        try:
            targets.check_url(_as_http(host), resolve=resolve, **targets.configured_rule())
        except UnsafeTargetError as exc:
            raise BadChannelURL(str(exc).replace("URL host", f"The host {host}")) from None


def mask(url: str) -> str:
    """What is shown of a channel after it is created: its scheme, and its
    host when that looks like a host name or an address (``json://hooks.
    example.com``), never a path, a user, a password or a token. A hosted
    service's "host" is often a token (``slack://TOKEN/…``): a host without a
    dot, other than ``localhost``, is not shown."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return url.split("://", 1)[0] + "://…"
    scheme = parts.scheme.lower()
    shown = targets.ip_literal(host) is not None or "." in host or host == "localhost"
    if not shown:
        return f"{scheme}://…"
    host_part = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host_part}{f':{port}' if port else ''}/…"
