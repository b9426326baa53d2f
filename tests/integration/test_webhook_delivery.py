"""deliver() against a real aiohttp receiver on 127.0.0.1 (docs/security.md "Outbound
address guard").

No mocks of aiohttp: each test starts a real server on an ephemeral port and
drives the client with asyncio.run(). Host names other than "localhost" are
answered by an injected resolver, so no test ever connects outside loopback.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import socket
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from standardwebhooks.webhooks import Webhook

from core.db import db_now
from dispatch.dispatcher import Dispatcher
from dispatch.webhooks import (
    MAX_RESPONSE_BYTES,
    Delivery,
    DeliveryResult,
    GuardedResolver,
    RefusedAddressError,
    UnsafeTargetError,
    check_url,
    deliver,
    make_session,
    resolve_public,
)
from dispatch.worker import Worker
from runs import identity, job_verbs, retention
from runs.models import Run
from runs.retry import Outcome
from tests.factories import make_job, rewrite_job

T = TypeVar("T")

TIMEOUT = 1.5
SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()
RUN_ID = "0b6f3c1e-5d7a-4d3b-9f1e-6c2a8e4b7d90"


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A receiver that records every request, then answers by path."""

    port: int = 0
    requests: list[Recorded] = field(default_factory=list)
    huge_bytes_written: int = 0

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Recorded(request.path, dict(request.headers), body))
        path = request.path
        if path.startswith("/status/"):
            code = int(path.removeprefix("/status/"))
            headers: dict[str, str] = {}
            if code == 429:
                headers["Retry-After"] = "120"
            if code == 302:
                headers["Location"] = self.url("/redirected")
            return web.Response(status=code, text=f"status {code}", headers=headers)
        if path == "/huge":
            return await self._huge(request)
        if path == "/hang":
            await asyncio.sleep(60)
        if path == "/trickle":
            return await self._trickle(request)
        if path == "/nul":
            return web.Response(body=b"bad\x00byte \xff" + "é".encode() * 600)
        return web.Response(text="ok")

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        size = 10 * 1024 * 1024
        response = web.StreamResponse(status=200)
        response.content_length = size
        await response.prepare(request)
        chunk = b"a" * 65536
        try:
            while self.huge_bytes_written < size:
                await response.write(chunk)
                self.huge_bytes_written += len(chunk)
        except (ConnectionError, OSError):
            pass  # the client hung up after its 64 KiB, as it should
        return response

    async def _trickle(self, request: web.Request) -> web.StreamResponse:
        # Headers arrive at once, then one byte every 0.5 s: a per-read
        # timeout would never fire, only a total deadline stops this.
        response = web.StreamResponse(status=200)
        response.content_length = 1000
        await response.prepare(request)
        for _ in range(1000):
            await response.write(b"x")
            await asyncio.sleep(0.5)
        return response


@asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    rx = Receiver()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", rx.handle)
    # Hung handlers are cancelled on cleanup instead of being waited for.
    runner = web.AppRunner(app, shutdown_timeout=0.1, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    rx.port = runner.addresses[0][1]
    try:
        yield rx
    finally:
        await runner.cleanup()


@contextmanager
def receiver_in_thread() -> Iterator[Receiver]:
    """The same receiver on its own event loop in a thread, for code under
    test that runs a loop of its own (``Worker.run_once`` calls asyncio.run)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    serving = receiver()
    try:
        yield asyncio.run_coroutine_threadsafe(serving.__aenter__(), loop).result(timeout=30)
    finally:
        asyncio.run_coroutine_threadsafe(serving.__aexit__(None, None, None), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


@asynccontextmanager
async def header_trickler() -> AsyncIterator[int]:
    """A raw TCP server that sends its status line one byte every 0.5 s."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok":
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.5)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


class FakeDNS(AbstractResolver):
    """An aiohttp resolver with a fixed table; answers may change per lookup."""

    def __init__(self, table: dict[str, list[list[str]]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        answers = self.table[host]
        addresses = answers.pop(0) if len(answers) > 1 else answers[0]
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        pass


def make_delivery(url: str, **overrides: Any) -> Delivery:
    fields: dict[str, Any] = {
        "run_id": RUN_ID,
        "job_id": "4f1c8a2e-2b3d-4e5f-8a9b-0c1d2e3f4a5b",
        "job_name": "integration",
        "scheduled_at": datetime(2026, 11, 30, 1, 0, tzinfo=UTC),
        "kind": "scheduled",
        "attempt": 1,
        "payload": {"hello": "world"},
        "url": url,
        "secrets": [SECRET],
        "timeout_seconds": TIMEOUT,
    }
    fields.update(overrides)
    return Delivery(**fields)


def run(scenario: Coroutine[Any, Any, T]) -> T:
    # pytest-asyncio is not a dependency: each test owns one event loop.
    return asyncio.run(scenario)


async def deliver_to(
    path: str,
    *,
    allow_private: bool = True,
    session_allow_private: bool | None = None,
    host: str = "127.0.0.1",
    timeout: float = TIMEOUT,
) -> tuple[DeliveryResult, Receiver]:
    async with receiver() as rx:
        session_private = allow_private if session_allow_private is None else session_allow_private
        async with make_session(allow_private=session_private) as session:
            result = await deliver(
                session,
                make_delivery(rx.url(path, host), timeout_seconds=timeout),
                now=datetime.now(UTC),
                allow_private=allow_private,
            )
    return result, rx


# --- outcomes by status ----------------------------------------------------------


def test_2xx_is_success_and_the_request_verifies_with_standard_webhooks() -> None:
    result, rx = run(deliver_to("/ok"))

    assert result.outcome is Outcome.SUCCESS
    assert result.status_code == 200
    assert result.error == ""
    assert result.excerpt == "ok"
    assert result.gone is False
    assert len(rx.requests) == 1
    request = rx.requests[0]
    parsed = Webhook(SECRET).verify(request.body, request.headers)
    assert parsed["data"]["run_id"] == RUN_ID
    assert request.headers["webhook-id"] == request.headers["idempotency-key"] == RUN_ID
    assert request.headers["User-Agent"].startswith("Punctual/")
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Accept-Encoding"] == "identity"
    assert "Cookie" not in request.headers


def test_500_is_retryable() -> None:
    result, _ = run(deliver_to("/status/500"))
    assert result.outcome is Outcome.RETRYABLE
    assert result.status_code == 500
    assert result.error.startswith("HTTP 500")
    assert result.excerpt == "status 500"


def test_400_is_permanent() -> None:
    result, _ = run(deliver_to("/status/400"))
    assert result.outcome is Outcome.PERMANENT
    assert result.status_code == 400
    assert result.gone is False


def test_429_surfaces_retry_after() -> None:
    result, _ = run(deliver_to("/status/429"))
    assert result.outcome is Outcome.RETRYABLE
    assert result.status_code == 429
    assert result.retry_after == "120"


def test_302_is_not_followed_and_is_permanent() -> None:
    result, rx = run(deliver_to("/status/302"))
    assert result.outcome is Outcome.PERMANENT
    assert result.status_code == 302
    assert "not followed" in result.error
    assert [r.path for r in rx.requests] == ["/status/302"]  # no second request


def test_410_is_permanent_and_gone() -> None:
    result, _ = run(deliver_to("/status/410"))
    assert result.outcome is Outcome.PERMANENT
    assert result.status_code == 410
    assert result.gone is True


# --- limits -------------------------------------------------------------------------


def test_a_10_mb_response_is_read_only_up_to_64_kib() -> None:
    result, _ = run(deliver_to("/huge", timeout=10))
    assert result.outcome is Outcome.SUCCESS
    assert result.body_bytes == MAX_RESPONSE_BYTES
    assert result.excerpt == "a" * 500


def test_a_hung_receiver_times_out_as_retryable() -> None:
    result, rx = run(deliver_to("/hang"))
    assert result.outcome is Outcome.RETRYABLE
    assert result.status_code is None
    assert "timed out" in result.error
    assert TIMEOUT * 1000 * 0.9 <= result.duration_ms < (TIMEOUT + 1.5) * 1000
    assert len(rx.requests) == 1


def test_a_body_trickled_byte_by_byte_cannot_stretch_the_deadline() -> None:
    result, _ = run(deliver_to("/trickle"))
    assert result.outcome is Outcome.RETRYABLE
    assert result.status_code == 200  # the status line came; the attempt did not finish
    assert "timed out" in result.error
    assert result.duration_ms < (TIMEOUT + 1.5) * 1000


def test_headers_trickled_byte_by_byte_cannot_stretch_the_deadline() -> None:
    async def scenario() -> DeliveryResult:
        async with header_trickler() as port, make_session(allow_private=True) as session:
            return await deliver(
                session,
                make_delivery(f"http://127.0.0.1:{port}/hook"),
                now=datetime.now(UTC),
                allow_private=True,
            )

    result = run(scenario())
    assert result.outcome is Outcome.RETRYABLE
    assert result.status_code is None
    assert "timed out" in result.error
    assert result.duration_ms < (TIMEOUT + 1.5) * 1000


def test_a_closed_port_is_a_retryable_connection_error() -> None:
    async def scenario() -> DeliveryResult:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # bound, never listening: connection refused
            async with make_session(allow_private=True) as session:
                return await deliver(
                    session,
                    make_delivery(f"http://127.0.0.1:{port}/hook"),
                    now=datetime.now(UTC),
                    allow_private=True,
                )

    result = run(scenario())
    assert result.outcome is Outcome.RETRYABLE
    assert result.status_code is None
    assert result.error


# --- the address guard ----------------------------------------------------------------


def test_loopback_is_refused_without_allow_private() -> None:
    result, rx = run(deliver_to("/ok", allow_private=False))
    assert result.outcome is Outcome.PERMANENT
    assert "refused non-public address 127.0.0.1" in result.error
    assert rx.requests == []


def test_deliver_refuses_a_literal_loopback_even_through_a_permissive_session() -> None:
    # aiohttp never asks the resolver about IP literals, so deliver() must.
    result, rx = run(deliver_to("/ok", allow_private=False, session_allow_private=True))
    assert result.outcome is Outcome.PERMANENT
    assert rx.requests == []


def test_localhost_is_refused_by_the_guarded_resolver() -> None:
    result, rx = run(deliver_to("/ok", allow_private=False, host="localhost"))
    assert result.outcome is Outcome.PERMANENT
    assert "refused non-public address" in result.error
    assert rx.requests == []


def test_a_name_resolving_to_a_private_address_is_refused_before_connecting() -> None:
    dns = FakeDNS({"internal.example": [["10.0.0.5"]]})

    async def scenario() -> DeliveryResult:
        async with make_session(allow_private=False, resolver=dns) as session:
            return await deliver(
                session,
                make_delivery("http://internal.example/hook"),
                now=datetime.now(UTC),
                allow_private=False,
            )

    result = run(scenario())
    assert result.outcome is Outcome.PERMANENT
    assert result.status_code is None
    assert "refused non-public address 10.0.0.5" in result.error
    assert dns.asked == ["internal.example"]


def test_guarded_resolver_refuses_private_answers_and_passes_public_ones() -> None:
    dns = FakeDNS(
        {
            "internal.example": [["10.0.0.5"]],
            "mixed.example": [["93.184.215.14", "169.254.169.254"]],
            "public.example": [["93.184.215.14", "2606:4700:4700::1111"]],
        }
    )

    async def scenario() -> list[str]:
        guard = GuardedResolver(allow_private=False, inner=dns)
        for host in ("internal.example", "mixed.example"):
            with pytest.raises(RefusedAddressError, match="refused non-public address"):
                await guard.resolve(host, 443)
        answers = await guard.resolve("public.example", 443)
        permissive = GuardedResolver(allow_private=True, inner=dns)
        assert [a["host"] for a in await permissive.resolve("internal.example", 80)] == ["10.0.0.5"]
        return [a["host"] for a in answers]

    assert run(scenario()) == ["93.184.215.14", "2606:4700:4700::1111"]


def test_dns_rebinding_between_save_and_delivery_is_refused() -> None:
    # The name answers a public address when the job is saved, then flips to
    # loopback — where our receiver listens — when the worker delivers.
    async def scenario() -> tuple[DeliveryResult, Receiver]:
        async with receiver() as rx:
            url = rx.url("/ok", host="rebind.example")
            check_url(url, allow_private=False, resolve=lambda host: ["93.184.215.14"])
            dns = FakeDNS({"rebind.example": [["127.0.0.1"]]})
            async with make_session(allow_private=False, resolver=dns) as session:
                result = await deliver(
                    session, make_delivery(url), now=datetime.now(UTC), allow_private=False
                )
        return result, rx

    result, rx = run(scenario())
    assert result.outcome is Outcome.PERMANENT
    assert "refused non-public address 127.0.0.1" in result.error
    assert rx.requests == []


def test_the_connection_goes_to_the_address_the_resolver_returned() -> None:
    # With private targets allowed, a made-up name pointed at our receiver
    # reaches it: aiohttp connects to exactly what the (guarded) resolver said.
    async def scenario() -> tuple[DeliveryResult, Receiver]:
        async with receiver() as rx:
            dns = FakeDNS({"receiver.test": [["127.0.0.1"]]})
            async with make_session(allow_private=True, resolver=dns) as session:
                result = await deliver(
                    session,
                    make_delivery(rx.url("/ok", host="receiver.test")),
                    now=datetime.now(UTC),
                    allow_private=True,
                )
        return result, rx

    result, rx = run(scenario())
    assert result.outcome is Outcome.SUCCESS
    assert rx.requests[0].headers["Host"] == f"receiver.test:{rx.port}"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.1:{port}/ok",
        "http://0x7f000001:{port}/ok",
        "http://2130706433:{port}/ok",
        "http://[::ffff:127.0.0.1]:{port}/ok",
    ],
)
def test_shorthand_loopback_spellings_are_refused_at_delivery(url: str) -> None:
    async def scenario() -> tuple[DeliveryResult, Receiver]:
        async with receiver() as rx, make_session(allow_private=False) as session:
            result = await deliver(
                session,
                make_delivery(url.format(port=rx.port)),
                now=datetime.now(UTC),
                allow_private=False,
            )
        return result, rx

    result, rx = run(scenario())
    assert result.outcome is Outcome.PERMANENT
    assert "non-public" in result.error
    assert rx.requests == []


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1/hook", "http://user:pw@127.0.0.1/hook", "http://999.0.0.1/"]
)
def test_an_invalid_url_is_permanent_and_never_sent(url: str) -> None:
    async def scenario() -> DeliveryResult:
        async with make_session(allow_private=True) as session:
            return await deliver(
                session, make_delivery(url), now=datetime.now(UTC), allow_private=True
            )

    result = run(scenario())
    assert result.outcome is Outcome.PERMANENT
    assert result.status_code is None
    assert result.error


def test_resolve_public_refuses_private_answers_and_literals() -> None:
    dns = FakeDNS({"internal.example": [["10.0.0.5"]], "public.example": [["93.184.215.14"]]})

    async def scenario() -> list[str]:
        with pytest.raises(UnsafeTargetError, match=r"10\.0\.0\.5"):
            await resolve_public("internal.example", 443, allow_private=False, resolver=dns)
        with pytest.raises(UnsafeTargetError, match=r"127\.0\.0\.1"):
            await resolve_public("2130706433", 80, allow_private=False, resolver=dns)
        assert await resolve_public("127.1", 80, allow_private=True) == ["127.0.0.1"]
        return await resolve_public("public.example", 443, allow_private=False, resolver=dns)

    assert run(scenario()) == ["93.184.215.14"]
    assert "2130706433" not in dns.asked  # literals never reach DNS


def test_excerpt_is_short_decoded_text_without_nul_bytes() -> None:
    # PostgreSQL text columns reject NUL; the receiver controls these bytes.
    result, _ = run(deliver_to("/nul"))
    assert result.outcome is Outcome.SUCCESS
    assert "\x00" not in result.excerpt
    assert result.excerpt.startswith("bad\ufffdbyte \ufffdéé")
    assert len(result.excerpt) == 500


def test_a_malformed_secret_fails_closed_and_nothing_is_sent() -> None:
    bad_secret = "whsec_not*base64*at*all"

    async def scenario() -> tuple[DeliveryResult, Receiver]:
        async with receiver() as rx, make_session(allow_private=True) as session:
            result = await deliver(
                session,
                make_delivery(rx.url("/ok"), secrets=[bad_secret]),
                now=datetime.now(UTC),
                allow_private=True,
            )
        return result, rx

    result, rx = run(scenario())
    assert result.outcome is Outcome.PERMANENT
    assert "base64" in result.error
    assert "not*base64" not in result.error
    assert rx.requests == []


def test_errors_never_contain_the_secret() -> None:
    results = [
        run(deliver_to(path, allow_private=allow))
        for path, allow in [("/status/500", True), ("/hang", True), ("/ok", False)]
    ]
    secret_body = SECRET.removeprefix("whsec_")
    for result, _ in results:
        assert secret_body not in result.error
        assert secret_body not in result.excerpt


# --- demo mode: loopback, and no other private address ----------------------------

DEMO_RULE = {"allow_private": False, "allow_loopback": True}


async def deliver_with_demo_rule(url: str, dns: FakeDNS | None = None) -> DeliveryResult:
    async with make_session(**DEMO_RULE, resolver=dns) as session:
        return await deliver(session, make_delivery(url), now=datetime.now(UTC), **DEMO_RULE)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
def test_demo_mode_delivers_to_loopback(host) -> None:
    async def scenario() -> tuple[DeliveryResult, Receiver]:
        async with receiver() as rx:
            return await deliver_with_demo_rule(rx.url("/ok", host=host)), rx

    result, rx = run(scenario())
    assert result.outcome is Outcome.SUCCESS, result.error
    assert len(rx.requests) == 1


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://10.0.0.1/hook", "10.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://[fd00::1]/hook", "fd00::1"),
        ("http://[::ffff:10.0.0.1]/hook", "::ffff:a00:1"),
        ("http://internal.example/hook", "10.0.0.5"),
        ("http://mixed.example/hook", "169.254.169.254"),
    ],
)
def test_demo_mode_refuses_every_other_private_address_at_delivery(url, address) -> None:
    dns = FakeDNS(
        {
            "internal.example": [["10.0.0.5"]],
            "mixed.example": [["127.0.0.1", "169.254.169.254"]],
        }
    )
    result = run(deliver_with_demo_rule(url, dns))
    assert result.outcome is Outcome.PERMANENT
    assert f"refused non-public address {address}" in result.error


def test_demo_mode_at_save_refuses_private_names_and_passes_loopback_ones() -> None:
    answers = {"internal.example": ["10.0.0.5"], "localhost": ["127.0.0.1", "::1"]}
    check_url("http://localhost:8000/demo/receiver/", **DEMO_RULE, resolve=answers.__getitem__)
    with pytest.raises(UnsafeTargetError, match=r"non-public address \(10.0.0.5\)"):
        check_url("http://internal.example/", **DEMO_RULE, resolve=answers.__getitem__)


@pytest.mark.django_db
def test_demo_mode_narrows_allow_private_targets_for_the_worker(settings) -> None:
    settings.PUNCTUAL_ALLOW_PRIVATE_TARGETS = True
    settings.PUNCTUAL_DEMO = True
    assert Worker(concurrency=1).address_rule == DEMO_RULE
    settings.PUNCTUAL_DEMO = False
    assert Worker(concurrency=1).address_rule == {"allow_private": True, "allow_loopback": False}


# --- the identity a receiver de-duplicates on ---------------------------------------


@pytest.mark.django_db
def test_the_worker_sends_the_fire_id_and_again_after_the_run_was_pruned_and_backfilled(
    owner, settings
) -> None:
    """webhook-id = Idempotency-Key = uuid5 of (job, scheduled_at): a fire whose
    row was pruned and made again by a backfill reaches the receiver under the
    id it already has, so the receiver can tell it is the same fire."""
    settings.PUNCTUAL_ALLOW_PRIVATE_TARGETS = True
    fire = db_now() - dt.timedelta(minutes=2)
    with receiver_in_thread() as rx:
        job = make_job(owner, interval_seconds=3600, url=rx.url("/ok"))
        rewrite_job(job, next_fire_at=fire, created_at=fire, start_at=fire)
        job.refresh_from_db()
        assert Dispatcher().tick(now=fire + dt.timedelta(seconds=1)).created == {"pending": 1}
        assert Worker(concurrency=5).run_once() == 1

        assert Run.objects.get(job=job).state == "succeeded"
        assert retention.prune_batch(fire + dt.timedelta(seconds=1)) == 1
        assert job_verbs.backfill(job, fire, fire + dt.timedelta(seconds=1))["created"] == 1
        assert Worker(concurrency=5).run_once() == 1

    expected = str(identity.fire_id(job.pk, fire))
    sent = [(r.headers["webhook-id"], r.headers["idempotency-key"]) for r in rx.requests]
    assert sent == [(expected, expected), (expected, expected)]
