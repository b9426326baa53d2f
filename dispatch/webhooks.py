"""The only outbound HTTP in Punctual: signing, the address guard, limits, errors.

Everything a receiver sees is built here (docs/guides/receiver.md "The request"). The
rules about where Punctual may connect (docs/security.md "Outbound address guard") are
jobs/targets.py; this module applies them again at delivery time. It imports no
Django, so the worker and the unit tests share the same code.

How an address is vetted, end to end:

1. ``check_url()`` (jobs/targets.py) runs when a job is saved: scheme, host, no
   userinfo, length, port; then the host is resolved and every answer must be
   public.
2. ``deliver()`` re-checks the URL syntax and any literal IP host, because
   aiohttp connects to IP literals without asking a resolver.
3. For host names, the session's ``GuardedResolver`` vets each DNS answer, and
   aiohttp connects to exactly the addresses that resolver returned. A name
   that was public at save time and points at 127.0.0.1 at delivery time (DNS
   rebinding) is refused at step 3, and the TCP connection is never opened.
4. Redirects are never followed, so a public receiver cannot bounce a signed
   request to an internal address.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import functools
import hashlib
import hmac
import ipaddress
import json
import socket
import ssl
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from jobs.targets import (
    UnsafeTargetError,
    check_url,
    check_url_syntax,
    ip_literal,
    is_allowed_address,
    is_public_address,
    parse_target,
    refuse_non_public,
)
from runs.retry import Outcome, classify_status

__all__ = [
    "MAX_RESPONSE_BYTES",
    "USER_AGENT",
    "Delivery",
    "DeliveryResult",
    "GuardedResolver",
    "RefusedAddressError",
    "UnsafeTargetError",
    "build_request",
    "check_url",
    "check_url_syntax",
    "deliver",
    "is_public_address",
    "make_session",
    "prepare_lookups",
    "resolve_public",
    "secret_key_bytes",
    "sign",
    "signature_header",
]


def _version() -> str:
    try:
        return metadata.version("punctual")
    except metadata.PackageNotFoundError:
        return "0.1.0"


USER_AGENT = f"Punctual/{_version()}"

# A receiver that answers with a 10 MB page (an HTML error page, or a hostile
# endless stream) must not cost a worker that much memory per delivery: with
# 500 deliveries in flight that would be gigabytes.
MAX_RESPONSE_BYTES = 64 * 1024
MAX_EXCERPT_CHARS = 500
MAX_ERROR_CHARS = 2000

# Cached DNS answers are only ever vetted ones (a refused lookup raises and is
# not cached), so the cache cannot launder a rebinding answer. Keeping it short
# still means a receiver that moves hosts is followed within seconds.
DNS_CACHE_SECONDS = 10

_SECRET_PREFIX = "whsec_"


class RefusedAddressError(OSError):
    """Raised by ``GuardedResolver`` inside aiohttp's connector.

    It is an ``OSError`` because aiohttp wraps resolver ``OSError``s in
    ``ClientConnectorDNSError`` before any connection is attempted; ``deliver()``
    finds it again in that wrapper and classifies the attempt as permanent.
    """

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, message)


# --------------------------------------------------------------------------
# Signing (Standard Webhooks, v1 = HMAC-SHA256)
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=8192)
def secret_key_bytes(secret: str) -> bytes:
    """The HMAC key behind a ``whsec_<base64>`` secret.

    Error messages never echo the secret: they end up in run errors and logs.
    Remembered per secret (a refusal is not): a worker signs every delivery
    with the same few thousand keys.
    """
    if not isinstance(secret, str) or not secret.startswith(_SECRET_PREFIX):
        raise ValueError("webhook secret must start with 'whsec_'")
    encoded = secret[len(_SECRET_PREFIX) :]
    # Tolerate missing padding, as the reference implementation does.
    encoded += "=" * (-len(encoded) % 4)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("webhook secret is not valid base64") from None
    if not key:
        raise ValueError("webhook secret is empty")
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature over ``"<msg_id>.<timestamp>.<body>"``."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    # Not hmac.digest: OpenSSL's one-shot HMAC gives up the GIL around a few
    # microseconds of work, and the worker's event loop, which signs, then
    # waits for its database thread to hand it back, up to a switch interval
    # (5 ms) each time. An HMAC object hashes a short message holding it.
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_header(secrets: list[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """Space-separated signatures, one per secret.

    During a rotation both the new and the old secret sign, so a receiver that
    has not yet switched keeps verifying with the old one.
    """
    if not secrets:
        # Fail closed: an unsigned webhook would be accepted by a receiver that
        # forgot to verify, and is forgeable by anyone who knows the URL.
        raise ValueError("no signing secret: refusing to send an unsigned webhook")
    return " ".join(sign(secret_key_bytes(s), msg_id, timestamp, body) for s in secrets)


# --------------------------------------------------------------------------
# The request
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """Everything one attempt needs, copied out of the database by the worker."""

    run_id: str
    job_id: str
    job_name: str
    scheduled_at: datetime
    kind: str
    attempt: int
    payload: dict[str, Any]
    url: str
    # Current secret first. Kept out of repr() so that a logged Delivery, or a
    # traceback that shows one, never leaks a signing secret.
    secrets: list[str] = field(repr=False)
    timeout_seconds: float
    # How the endpoint is called (jobs/http_options.py, which vetted these
    # when the job was saved). The headers and the Authorization value are
    # secrets: kept out of repr() like the signing secrets.
    method: str = "POST"
    body_mode: str = "envelope"
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    authorization: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.secrets:
            raise ValueError("a webhook delivery needs at least one signing secret")
        if not self.timeout_seconds > 0:
            raise ValueError("timeout_seconds must be positive")
        if self.scheduled_at.tzinfo is None:
            raise ValueError("scheduled_at must be timezone-aware")


def _iso_utc(value: datetime) -> str:
    """ISO 8601 in UTC with a ``Z`` suffix, the way DRF renders datetimes.

    Using DRF's form means ``scheduled_at`` in a webhook is the same string as in
    the REST API, so a receiver can compare the two without parsing.
    Microseconds appear only when non-zero, as with ``datetime.isoformat()``.
    """
    if value.tzinfo is None:
        raise ValueError("naive datetime: webhook times must be timezone-aware")
    text = value.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z"


def _dumps(value: Any) -> bytes:
    # allow_nan=False: NaN is not JSON, and a strict receiver would reject it.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


def build_body(delivery: Delivery, now: datetime) -> bytes:
    """What the request carries, by the job's body mode: the envelope, the
    payload alone, or nothing."""
    if delivery.body_mode == "none":
        return b""
    if delivery.body_mode == "payload":
        return _dumps(delivery.payload)
    return _dumps(
        {
            "type": "job.fire",
            "timestamp": _iso_utc(now),
            "data": {
                "run_id": delivery.run_id,
                "job_id": delivery.job_id,
                "job_name": delivery.job_name,
                "scheduled_at": _iso_utc(delivery.scheduled_at),
                "kind": delivery.kind,
                "attempt": delivery.attempt,
                "payload": delivery.payload,
            },
        }
    )


def build_request(delivery: Delivery, now: datetime) -> tuple[dict[str, str], bytes]:
    """The headers and body of one attempt, signed at ``now``.

    ``webhook-id`` and ``idempotency-key`` are both the run id, identical on
    every attempt of the run: that is what lets a receiver de-duplicate retries.
    The body timestamp and the signed ``webhook-timestamp`` are both ``now``.
    The signature covers the body as sent: empty under body mode ``none``.
    The job's own headers come last and may replace ``content-type``,
    ``user-agent`` and ``accept-encoding``; the reserved ones they cannot
    name (jobs/http_options.py refused them when the job was saved).
    """
    timestamp = int(now.timestamp())
    body = build_body(delivery, now)
    headers = {
        "content-type": "application/json",
        "webhook-id": delivery.run_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(delivery.secrets, delivery.run_id, timestamp, body),
        "idempotency-key": delivery.run_id,
        "user-agent": USER_AGENT,
        # We never decompress (auto_decompress=False): a 64 KiB gzip bomb could
        # expand to gigabytes. Asking for identity keeps the excerpt readable.
        "accept-encoding": "identity",
    }
    if not body:
        del headers["content-type"]
    for name, value in delivery.headers:
        # One header per name, whatever its case: aiohttp would send both.
        headers.pop(name.lower(), None)
        headers[name] = value
    if delivery.authorization is not None:
        headers["authorization"] = delivery.authorization
    return headers, body


# --------------------------------------------------------------------------
# The address guard at delivery time (the rules are jobs/targets.py)
# --------------------------------------------------------------------------


async def resolve_public(
    host: str,
    port: int,
    *,
    allow_private: bool,
    allow_loopback: bool = False,
    resolver: AbstractResolver | None = None,
) -> list[str]:
    """Resolve ``host`` and return its addresses, refusing any non-public one
    (loopback ones too, unless ``allow_loopback``).

    Literal IPs, in any spelling the OS accepts, are judged without DNS.
    ``resolver`` is an aiohttp ``AbstractResolver`` (default: ``ThreadedResolver``,
    i.e. ``getaddrinfo`` in a thread).
    """
    literal = ip_literal(host)
    if literal is not None:
        if not is_allowed_address(
            literal, allow_private=allow_private, allow_loopback=allow_loopback
        ):
            raise UnsafeTargetError(f"URL host is a non-public address ({literal})")
        return [str(literal)]
    inner = resolver or ThreadedResolver()
    try:
        results = await inner.resolve(host, port, family=socket.AF_UNSPEC)
    except OSError:
        raise UnsafeTargetError(f"could not resolve {host}") from None
    addresses = [result["host"] for result in results]
    if not addresses:
        raise UnsafeTargetError(f"could not resolve {host}")
    if not allow_private:
        refuse_non_public(addresses, allow_loopback=allow_loopback)
    return addresses


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that refuses non-public answers.

    aiohttp connects to the addresses its resolver returns, so vetting them here
    closes the DNS-rebinding window: there is no second lookup between the check
    and the connect. If any answer is non-public the whole lookup is refused
    (not filtered), matching the save-time rule. ``allow_loopback`` lets
    loopback answers through (demo mode).
    """

    def __init__(
        self,
        *,
        allow_private: bool,
        allow_loopback: bool = False,
        inner: AbstractResolver | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._allow_loopback = allow_loopback
        # ThreadedResolver needs a running event loop: make the guard there
        # (make_session() is called on one).
        self._inner = inner or ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family=family)
        for result in results:
            address = result["host"]
            try:
                allowed = is_allowed_address(
                    ipaddress.ip_address(address),
                    allow_private=self._allow_private,
                    allow_loopback=self._allow_loopback,
                )
            except ValueError:
                allowed = False
            if not allowed:
                raise RefusedAddressError(f"refused non-public address {address} for {host}")
        return results

    async def close(self) -> None:
        await self._inner.close()


async def prepare_lookups(timeout: float) -> None:
    """Make one lookup now, of ``localhost`` (its answer is not used), within
    ``timeout`` seconds. A process's first lookup starts the event loop's
    lookup threads and loads the C library's name-service modules; a worker
    does it before its first claim, not in a delivery whose lease is already
    running. A lookup that fails or takes too long only means the first
    delivery to a host name pays for it."""
    resolver = ThreadedResolver()
    try:
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(timeout):
                await resolver.resolve("localhost", 0, family=socket.AF_UNSPEC)
    finally:
        await resolver.close()


def make_session(
    *,
    limit: int = 1000,
    allow_private: bool,
    allow_loopback: bool = False,
    resolver: AbstractResolver | None = None,
) -> aiohttp.ClientSession:
    """The one HTTP client session a worker uses for all its deliveries.

    Call it inside a running event loop. ``resolver`` replaces the OS resolver
    behind the guard (tests use it to fake DNS answers).
    """
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(
            allow_private=allow_private, allow_loopback=allow_loopback, inner=resolver
        ),
        limit=limit,
        # Many jobs share one receiver host; a per-host cap would make them
        # queue behind each other and fire late.
        limit_per_host=0,
        ttl_dns_cache=DNS_CACHE_SECONDS,
        force_close=False,
    )
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,  # decompression bombs; see accept-encoding above
        cookie_jar=aiohttp.DummyCookieJar(),  # one receiver's cookies must not reach another
        # trust_env=False ignores HTTP(S)_PROXY: a proxy resolves the host
        # itself, which would bypass the address guard entirely.
        trust_env=False,
        # No aiohttp timeout at all: deliver() puts one asyncio deadline
        # around connect, headers and body.
        timeout=aiohttp.ClientTimeout(total=None),
    )


# --------------------------------------------------------------------------
# Delivery
# --------------------------------------------------------------------------


@dataclass
class DeliveryResult:
    outcome: Outcome
    status_code: int | None
    error: str  # short, at most 2,000 characters; "" on success
    excerpt: str  # the first at most 500 characters of the response body
    duration_ms: int
    retry_after: str | None  # the raw Retry-After header, if any
    gone: bool  # 410: the worker pauses the job
    # How much of the response body was read: at most MAX_RESPONSE_BYTES, so a
    # value at the cap means the rest was dropped unread.
    body_bytes: int = 0


def _clean(text: str, limit: int) -> str:
    # PostgreSQL text cannot hold NUL, and a receiver controls these bytes: an
    # excerpt with "\x00" would make the worker's completion UPDATE fail.
    return text.replace("\x00", "\ufffd")[:limit]


async def _read_capped(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """Read at most ``limit`` bytes; the rest is dropped with the connection."""
    received = bytearray()
    while len(received) < limit:
        chunk = await stream.read(limit - len(received))
        if not chunk:
            break
        received += chunk
    return bytes(received)


def _find_refusal(exc: BaseException) -> RefusedAddressError | None:
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, RefusedAddressError):
            return current
        if isinstance(current, aiohttp.ClientConnectorError):
            pending.append(current.os_error)
        pending.extend((current.__cause__, current.__context__))
    return None


def _classify_error(exc: BaseException, timeout_seconds: float) -> tuple[Outcome, str]:
    """Sort a failed attempt into retryable or permanent, with an owner-readable message.

    Permanent means "the same request will fail the same way": a refused
    address, a bad URL, a TLS certificate that does not verify. Everything
    network-shaped (refused connection, reset, DNS failure, timeout) is
    retryable, because receivers restart and networks blip.
    """
    refusal = _find_refusal(exc)
    if refusal is not None:
        return Outcome.PERMANENT, str(refusal.strerror)
    if isinstance(exc, TimeoutError):
        # Includes aiohttp's ServerTimeoutError and ConnectionTimeoutError.
        return Outcome.RETRYABLE, f"timed out after {timeout_seconds:g} s"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return Outcome.PERMANENT, f"TLS certificate error: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLCertVerificationError):
        # A failed TLS handshake (wrong protocol, https:// to a plain-HTTP
        # port) is a configuration problem that a retry in seconds won't fix.
        return Outcome.PERMANENT, f"TLS error: {exc}"
    if isinstance(exc, aiohttp.ServerFingerprintMismatch):
        return Outcome.PERMANENT, "TLS fingerprint mismatch"
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return Outcome.PERMANENT, f"invalid URL: {exc}"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return Outcome.RETRYABLE, f"could not resolve {exc.host}: {exc.os_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return Outcome.RETRYABLE, f"connection failed: {exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return Outcome.RETRYABLE, "server disconnected before answering"
    if isinstance(exc, aiohttp.ClientError | OSError):
        return Outcome.RETRYABLE, f"{type(exc).__name__}: {exc}"
    # ValueError from the request layer (e.g. a header aiohttp will not send).
    return Outcome.PERMANENT, f"{type(exc).__name__}: {exc}"


@functools.lru_cache(maxsize=8192)
def _literal_refusal(host: str, allow_private: bool, allow_loopback: bool) -> str | None:
    """Why a literal IP host may not be reached, or None (a name, or an allowed
    address). aiohttp connects to literals without asking the resolver, so
    they are judged here. The verdict depends on nothing but the arguments,
    and parsing the address on every delivery was 3 % of a busy worker."""
    literal = ip_literal(host)
    if literal is not None and not is_allowed_address(
        literal, allow_private=allow_private, allow_loopback=allow_loopback
    ):
        return f"refused non-public address {literal}"
    return None


def _status_error(status: int, reason: str | None, location: str | None) -> str:
    text = f"HTTP {status} {reason or ''}".rstrip()
    if status == 410:
        return f"{text}: the receiver says this URL no longer exists"
    if 300 <= status <= 399:
        where = f" to {location}" if location else ""
        return f"{text}: redirect{where} not followed; update the job's URL"
    return text


async def deliver(
    session: aiohttp.ClientSession,
    delivery: Delivery,
    *,
    now: datetime,
    allow_private: bool,
    allow_loopback: bool = False,
) -> DeliveryResult:
    """Make one attempt and say what happened. Never raises for network problems.

    1. Check the URL syntax and any literal IP host (aiohttp does not resolve
       literals, so the session's GuardedResolver never sees them).
    2. Sign the request at ``now``.
    3. Send it (the job's method, POST by default) without following
       redirects, under one hard deadline covering connect, headers and
       body: a receiver that trickles a byte every 500 ms cannot stretch
       the attempt past ``timeout_seconds``.
    4. Read at most 64 KiB of the body, then drop the connection if more is left.
    5. Classify: 2xx success, statuses per ``classify_status``, 410 gone.
       A deadline that expires while the body is still arriving is a
       retryable timeout even after a 2xx status line (``status_code`` then
       shows it): the attempt did not finish, and the run id lets the receiver
       drop the duplicate.

    ``session`` must come from ``make_session()``: its resolver is what vets
    host names. When the session and ``allow_private`` disagree, the stricter
    one wins.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    started = time.monotonic()

    def result(
        outcome: Outcome,
        error: str = "",
        *,
        status: int | None = None,
        body: bytes = b"",
        retry_after: str | None = None,
        gone: bool = False,
    ) -> DeliveryResult:
        excerpt = body[: MAX_EXCERPT_CHARS * 4].decode("utf-8", errors="replace")
        return DeliveryResult(
            outcome=outcome,
            status_code=status,
            error=_clean(error, MAX_ERROR_CHARS),
            excerpt=_clean(excerpt, MAX_EXCERPT_CHARS),
            duration_ms=int((time.monotonic() - started) * 1000),
            retry_after=retry_after,
            gone=gone,
            body_bytes=len(body),
        )

    try:
        target = parse_target(delivery.url)
        refusal = _literal_refusal(target.raw_host or "", allow_private, allow_loopback)
        if refusal is not None:
            raise UnsafeTargetError(refusal)
        headers, body = build_request(delivery, now)
    except (ValueError, TypeError) as exc:
        # A bad URL, a bad secret or an unserializable payload: retrying sends
        # the same thing again. Our own messages never contain the secret.
        return result(Outcome.PERMANENT, str(exc))

    status: int | None = None
    retry_after: str | None = None
    try:
        # The one deadline. No aiohttp ClientTimeout beside it: the session has
        # none, and a second timer per request was 9 % of a busy worker's CPU.
        async with asyncio.timeout(delivery.timeout_seconds):
            async with session.request(
                delivery.method,
                target,
                data=body or None,
                headers=headers,
                allow_redirects=False,
            ) as response:
                status = response.status
                retry_after = response.headers.get("Retry-After")
                location = response.headers.get("Location")
                reason = response.reason
                received = await _read_capped(response.content, MAX_RESPONSE_BYTES)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        outcome, message = _classify_error(exc, delivery.timeout_seconds)
        return result(outcome, message, status=status, retry_after=retry_after)

    assert status is not None  # set as soon as the response headers arrived
    outcome = classify_status(status)
    error = "" if outcome is Outcome.SUCCESS else _status_error(status, reason, location)
    return result(
        outcome,
        error,
        status=status,
        body=received,
        retry_after=retry_after,
        gone=status == 410,
    )
