"""Which address a request comes from, as every limit counts it
(docs/operating/configuration.md ``PUNCTUAL_TRUSTED_PROXIES``).

One rule for all of them: the API's rate limits (accounts/throttles.py), the
sign-in attempt limits (django-axes' ``AXES_CLIENT_IP_CALLABLE``) and
anything else that tells clients apart by address. Two rules would let a
client choose, with one header, which of them it slips past.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str | None:
    """The address a request's limits are counted against.

    1. With ``PUNCTUAL_TRUSTED_PROXIES`` 0, the connection's own address:
       X-Forwarded-For is then whatever the client chose to write.
    2. Behind N proxies, each appends the address it received the request
       from, so the N-th entry from the right is the one the outermost proxy
       saw. Entries further left were written by the client and may be
       forged; they are never read.
    3. A header with fewer than N entries, or whose N-th entry from the
       right is not an IP address, was not written by the N proxies the
       setting promises: the connection's address counts (the nearest
       proxy's, which no client can forge). Taking the leftmost entry of a
       short header instead, as Django REST framework's ``get_ident`` does,
       would let each request name its own address and never reach a limit.

    None only when the server gave no connection address at all.
    """
    remote = request.META.get("REMOTE_ADDR")
    proxies = settings.PUNCTUAL_TRUSTED_PROXIES
    if not proxies:
        return remote
    header = request.META.get("HTTP_X_FORWARDED_FOR", "")
    forwarded = [entry.strip() for entry in header.split(",") if entry.strip()]
    if len(forwarded) < proxies:
        return remote
    try:
        return str(ipaddress.ip_address(forwarded[-proxies]))
    except ValueError:
        return remote
