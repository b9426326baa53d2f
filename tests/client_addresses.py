"""The cases of the one client-address rule (core/client_address.py), shared
by the tests of every limit that counts clients by address: the API's rate
limits and the sign-in attempt limits. Each limit must count each case
against the same address."""

from __future__ import annotations

import pytest

# REMOTE_ADDR: the client itself, or behind proxies the nearest proxy.
CONNECTION = "10.9.0.1"

# (PUNCTUAL_TRUSTED_PROXIES, X-Forwarded-For or None, the address counted)
_CASES = [
    ("no header", 0, None, CONNECTION),
    # No proxy: every entry is the client's own word.
    ("one entry", 0, "192.0.2.1", CONNECTION),
    ("long", 0, "198.51.100.7, 192.0.2.1", CONNECTION),
    ("not an address", 0, "not-an-address", CONNECTION),
    ("no header", 1, None, CONNECTION),
    ("one entry", 1, "192.0.2.1", "192.0.2.1"),
    # The client wrote the entries left of the proxy's: never read.
    ("long", 1, "198.51.100.7, 192.0.2.1", "192.0.2.1"),
    ("not an address", 1, "not-an-address", CONNECTION),
    ("address with a port", 1, "192.0.2.1:4431", CONNECTION),
    ("not an address after a forged one", 1, "192.0.2.1, not-an-address", CONNECTION),
    ("spelled another way", 1, "2001:DB8::1", "2001:db8::1"),
    ("no header", 2, None, CONNECTION),
    # Two proxies would have written two entries: the header is not theirs.
    ("short", 2, "192.0.2.1", CONNECTION),
    ("empty entries", 2, " , 192.0.2.1", CONNECTION),
    ("two entries", 2, "192.0.2.1, 10.9.0.2", "192.0.2.1"),
    ("long", 2, "198.51.100.7, 192.0.2.1, 10.9.0.2", "192.0.2.1"),
    ("not an address", 2, "not-an-address, 10.9.0.2", CONNECTION),
]

CASES = [
    pytest.param(proxies, header, counted, id=f"proxies={proxies}, {label}")
    for label, proxies, header, counted in _CASES
]


def headers(forwarded: str | None) -> dict[str, str]:
    """The request's WSGI variables: from CONNECTION, with ``forwarded`` as
    its X-Forwarded-For when given."""
    extra = {"REMOTE_ADDR": CONNECTION}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return extra
