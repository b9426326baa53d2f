"""Where a webhook may point: the outbound-address rules (docs/security.md "Outbound
address guard").

One set of rules for both moments a URL is judged: when a job is saved (the
API's serializer and the admin's form call ``check_url``, with the answers
of jobs/lookups.py, looked up before the save) and when it is
delivered (dispatch/webhooks.py vets the URL and each DNS answer again with
``parse_target``, ``ip_literal``, ``is_allowed_address`` and
``refuse_non_public``). The rules live here, under the delivery engine, so a
job can be validated without importing it. No Django, except the settings
that ``configured_rule`` reads when called: the unit tests use it as it is.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterable
from typing import TypedDict

from yarl import URL

__all__ = [
    "MAX_URL_LENGTH",
    "AddressRule",
    "UnsafeTargetError",
    "check_url",
    "check_url_syntax",
    "configured_rule",
    "ip_literal",
    "is_allowed_address",
    "is_loopback_address",
    "is_public_address",
    "parse_target",
    "refuse_non_public",
    "system_resolve",
]

MAX_URL_LENGTH = 2000


class UnsafeTargetError(ValueError):
    """A webhook URL that Punctual refuses to call. The message is shown to the owner."""


# Explicit lists on top of ipaddress.is_global, because is_global has changed
# between Python releases and gets some ranges wrong for our purpose: on 3.11,
# 224.0.0.1 (multicast) and ::127.0.0.1 (IPv4-compatible loopback) are "global".
_BLOCKED_V4 = tuple(
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",  # "this network": connecting to 0.0.0.0 reaches localhost on Linux
        "10.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT shared space, internal to a provider
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, incl. the 169.254.169.254 cloud metadata service
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # TEST-NET-1
        "192.88.99.0/24",  # deprecated 6to4 relay anycast
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # TEST-NET-2
        "203.0.113.0/24",  # TEST-NET-3
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, incl. 255.255.255.255 broadcast
    )
)
_BLOCKED_V6 = tuple(
    ipaddress.IPv6Network(net)
    for net in (
        # ::, ::1 and the deprecated IPv4-compatible form ::a.b.c.d: some stacks
        # still route ::127.0.0.1 to loopback, and no real receiver lives here.
        "::/96",
        "::ffff:0:0:0/96",  # IPv4-translated (RFC 2765)
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments, incl. Teredo tunnels (2001::/32)
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation (RFC 9637)
        "5f00::/16",  # SRv6 SIDs
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # deprecated site-local
        "ff00::/8",  # multicast
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def is_public_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True only for a globally routable unicast address.

    IPv6 forms that embed an IPv4 address (mapped ``::ffff:a.b.c.d``, NAT64
    ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::``) are judged by the IPv4
    address inside, because the packet ends up there: ``[::ffff:127.0.0.1]``
    is loopback, whatever its spelling.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            # A zone index only makes sense for link-local and other scoped
            # addresses; a public receiver never needs one.
            return False
        if ip.ipv4_mapped is not None:
            return is_public_address(ip.ipv4_mapped)
        if ip in _NAT64:
            return is_public_address(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.sixtofour is not None and not is_public_address(ip.sixtofour):
            return False
        blocked = any(ip in net for net in _BLOCKED_V6) or ip.is_site_local
    else:
        blocked = any(ip in net for net in _BLOCKED_V4)
    return not (
        blocked
        or not ip.is_global
        or ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


def is_loopback_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True for 127.0.0.0/8 and ::1, and for ``::ffff:127.x.y.z`` (the same
    loopback, spelled as IPv6): this host, and nothing else on the network."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return False
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def is_allowed_address(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
    *,
    allow_private: bool,
    allow_loopback: bool = False,
) -> bool:
    """The address rule and its two exceptions: public addresses always;
    loopback too with ``allow_loopback`` (demo mode); any address with
    ``allow_private`` (tests, development)."""
    return allow_private or is_public_address(ip) or (allow_loopback and is_loopback_address(ip))


class AddressRule(TypedDict):
    """The two exceptions to the address rule, as keyword arguments."""

    allow_private: bool
    allow_loopback: bool


def configured_rule() -> AddressRule:
    """The exceptions the settings grant, as keyword arguments for
    ``check_url``, ``is_allowed_address`` and the delivery guard.

    Demo mode (``PUNCTUAL_DEMO``) allows loopback and nothing else private,
    whatever ``PUNCTUAL_ALLOW_PRIVATE_TARGETS`` says: the demo's receivers
    live on 127.0.0.1, and a demo left reachable must not become a way to
    the cloud metadata service or the rest of the private network. Django is
    imported here, not at the top, so the rest of the module stays free of it.
    """
    from django.conf import settings

    if settings.PUNCTUAL_DEMO:
        return {"allow_private": False, "allow_loopback": True}
    return {"allow_private": settings.PUNCTUAL_ALLOW_PRIVATE_TARGETS, "allow_loopback": False}


# inet_aton() accepts legacy IPv4 spellings — "127.1", "0x7f.0.0.1",
# "2130706433", octal "0177.0.0.1" — and getaddrinfo() uses it before DNS, so an
# attacker can write loopback without a single "127.0.0.1" in the URL.
_LEGACY_V4 = re.compile(r"[0-9a-fA-FxX.]+")


def ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host string denotes on its own, without DNS, or None for a name."""
    text = host
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    # yarl keeps an IPv6 zone index percent-encoded ("fe80::1%25eth0").
    text = text.replace("%25", "%")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if text.isascii() and _LEGACY_V4.fullmatch(text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def _looks_like_ip(host: str) -> bool:
    # The same heuristic aiohttp uses to skip the resolver and connect directly.
    # A host that aiohttp treats as an IP but that we cannot parse must be
    # refused, or it would reach the socket layer unvetted.
    return ":" in host or host.replace(".", "").isdigit()


@functools.lru_cache(maxsize=8192)
def parse_target(url: str) -> URL:
    """Parse with yarl — the parser aiohttp itself uses — and check the syntax.

    Checking with the same parser that connects avoids parser differentials
    (a URL that urllib reads as one host and aiohttp as another).
    """
    if not isinstance(url, str) or not url:
        raise UnsafeTargetError("URL is required")
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeTargetError(f"URL is longer than {MAX_URL_LENGTH} characters")
    # Backslashes, whitespace and control characters are where URL parsers
    # disagree (WHATWG reads "\" as "/"); no valid URL needs them unescaped.
    if any(ch == "\\" or ch.isspace() or unicodedata.category(ch) == "Cc" for ch in url):
        raise UnsafeTargetError("URL must not contain spaces, control characters or backslashes")
    try:
        parsed = URL(url)
        netloc = urllib.parse.urlsplit(url).netloc
    except (ValueError, TypeError, UnicodeError):
        raise UnsafeTargetError("URL is not valid") from None
    if parsed.scheme not in ("http", "https"):
        raise UnsafeTargetError("URL must start with http:// or https://")
    # Userinfo would be sent as Basic credentials and shown in logs and the
    # admin, and "https://bank.example@evil.example/" misleads the human eye.
    # Both parsers must agree there is none.
    if "@" in netloc or parsed.raw_user is not None or parsed.raw_password is not None:
        raise UnsafeTargetError("URL must not contain a user name or password")
    host = parsed.raw_host
    if not host:
        raise UnsafeTargetError("URL must include a host name")
    if _looks_like_ip(host) and ip_literal(host) is None:
        raise UnsafeTargetError(f"URL host is not a valid IP address ({host})")
    port = parsed.port
    if port is None or not 1 <= port <= 65535:
        raise UnsafeTargetError("URL port must be between 1 and 65535")
    return parsed


def check_url_syntax(url: str) -> None:
    """Raise ``UnsafeTargetError`` unless ``url`` is a well-formed http(s) URL.

    No DNS, so it is cheap enough for every save and every delivery.
    """
    parse_target(url)


def refuse_non_public(addresses: Iterable[str], *, allow_loopback: bool = False) -> None:
    for address in addresses:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            # Fail closed: an answer we cannot read is an answer we cannot vet.
            raise UnsafeTargetError(
                f"URL host resolves to an unreadable address ({address})"
            ) from None
        if not is_allowed_address(ip, allow_private=False, allow_loopback=allow_loopback):
            raise UnsafeTargetError(f"URL host resolves to a non-public address ({address})")


def system_resolve(host: str) -> list[str]:
    """The addresses the operating system's resolver gives for ``host``
    (``getaddrinfo``), waiting as long as the resolver does: on a request
    path, look hosts up through jobs/lookups.py, which bounds the wait."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def check_url(
    url: str,
    *,
    allow_private: bool,
    allow_loopback: bool = False,
    resolve: Callable[[str], list[str]] | None = None,
) -> None:
    """The save-time check: syntax, then (unless ``allow_private``) every address.
    ``allow_loopback`` lets loopback addresses through too (demo mode).

    ``resolve`` maps an IDNA-encoded host name to address strings: on a
    request path, the ``Answers`` of jobs/lookups.py, looked up before any
    transaction within the request's deadline (it may raise
    ``UnsafeTargetError`` itself, for a name that did not answer in time);
    the default, ``system_resolve``, waits as long as the system resolver
    does. Any non-public answer refuses the URL: a name with one public and
    one private address would otherwise reach the private one on some
    attempts. Delivery checks again (DNS can change after a save).
    """
    parsed = parse_target(url)
    if allow_private:
        return
    host = parsed.raw_host
    assert host is not None  # parse_target guarantees it
    literal = ip_literal(host)
    if literal is not None:
        if not is_allowed_address(literal, allow_private=False, allow_loopback=allow_loopback):
            raise UnsafeTargetError(f"URL host is a non-public address ({literal})")
        return
    try:
        addresses = (resolve or system_resolve)(host)
    except (OSError, UnicodeError):
        raise UnsafeTargetError(f"could not resolve {host}") from None
    if not addresses:
        raise UnsafeTargetError(f"could not resolve {host}")
    refuse_non_public(addresses, allow_loopback=allow_loopback)
