"""What a receiver gets (docs/guides/receiver.md "The request") and where Punctual may
connect (docs/security.md "Outbound address guard").

No network: every name resolution below goes through an injected resolver,
except "localhost", which the OS answers from its hosts file.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from dispatch.webhooks import (
    USER_AGENT,
    Delivery,
    UnsafeTargetError,
    build_request,
    check_url,
    check_url_syntax,
    is_public_address,
    secret_key_bytes,
    sign,
    signature_header,
)

RUN_ID = "7d0c2a35-2a8e-4f7e-9c55-2b8a4d1f6a10"
JOB_ID = "a4f1e2d3-0000-4000-8000-000000000001"
SCHEDULED_AT = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def make_delivery(secrets: list[str], **overrides: object) -> Delivery:
    fields: dict[str, object] = {
        "run_id": RUN_ID,
        "job_id": JOB_ID,
        "job_name": "Nightly report — café",
        "scheduled_at": SCHEDULED_AT,
        "kind": "scheduled",
        "attempt": 2,
        "payload": {"report": "daily", "n": 3, "nested": {"ok": True}},
        "url": "https://receiver.example/hook",
        "secrets": secrets,
        "timeout_seconds": 30.0,
    }
    fields.update(overrides)
    return Delivery(**fields)  # type: ignore[arg-type]


# --- signatures ------------------------------------------------------------


def test_known_answer_vector_from_the_standard_webhooks_suite() -> None:
    key = secret_key_bytes("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    signature = sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_a_delivery_verifies_with_the_reference_library() -> None:
    secret = new_secret()
    # standardwebhooks checks the timestamp against the real clock (5 min
    # tolerance), so this one test signs at the real current time.
    headers, body = build_request(make_delivery([secret]), datetime.now(UTC))
    parsed = Webhook(secret).verify(body, headers)
    assert parsed["data"]["run_id"] == RUN_ID


def test_each_body_mode_is_signed_over_what_it_sends() -> None:
    secret = new_secret()
    now = datetime.now(UTC)
    bodies = {}
    for mode in ("envelope", "payload", "none"):
        headers, body = build_request(make_delivery([secret], body_mode=mode), now)
        Webhook(secret).verify(body, headers, json_parse=bool(body))
        bodies[mode] = (headers, body)
    assert json.loads(bodies["envelope"][1])["data"]["run_id"] == RUN_ID
    assert json.loads(bodies["payload"][1]) == {"report": "daily", "n": 3, "nested": {"ok": True}}
    headers, body = bodies["none"]
    assert body == b"" and "content-type" not in headers
    assert headers["idempotency-key"] == headers["webhook-id"] == RUN_ID


def test_a_jobs_headers_replace_ours_by_name_in_any_case_and_stay_out_of_repr() -> None:
    delivery = make_delivery(
        [new_secret()],
        headers=(("User-Agent", "cron-job"), ("X-Api-Key", "hv-unit-secret")),
        authorization="Bearer tok-unit-secret",
    )
    headers, _ = build_request(delivery, datetime.now(UTC))
    assert headers["User-Agent"] == "cron-job" and "user-agent" not in headers
    assert headers["X-Api-Key"] == "hv-unit-secret"
    assert headers["authorization"] == "Bearer tok-unit-secret"
    assert "secret" not in repr(delivery)


def test_during_rotation_either_secret_verifies() -> None:
    new, old = new_secret(), new_secret()
    headers, body = build_request(make_delivery([new, old]), datetime.now(UTC))
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(new).verify(body, headers)
    Webhook(old).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)


def test_a_tampered_body_does_not_verify() -> None:
    secret = new_secret()
    headers, body = build_request(make_delivery([secret]), datetime.now(UTC))
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace(b'"n":3', b'"n":4'), headers)


def test_signature_header_lists_one_signature_per_secret_in_order() -> None:
    a, b = new_secret(), new_secret()
    header = signature_header([a, b], "msg", 1700000000, b"{}")
    assert header.split(" ") == [
        sign(secret_key_bytes(a), "msg", 1700000000, b"{}"),
        sign(secret_key_bytes(b), "msg", 1700000000, b"{}"),
    ]


def test_empty_secret_list_fails_closed() -> None:
    with pytest.raises(ValueError):
        signature_header([], "msg", 1700000000, b"{}")
    with pytest.raises(ValueError):
        make_delivery([])


@pytest.mark.parametrize(
    "bad",
    ["", "whsec_", "sk_live_abc", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!!notbase64!!!"],
)
def test_malformed_secrets_are_refused_without_echoing_them(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        secret_key_bytes(bad)
    if len(bad) > 6:
        assert bad[6:] not in str(info.value)


def test_unpadded_secret_is_accepted_like_the_reference_library() -> None:
    key = b"0123456789abcdefghij12"  # 22 bytes: base64 ends in "=="
    padded = base64.b64encode(key).decode()
    assert padded.endswith("==")
    assert secret_key_bytes("whsec_" + padded) == key
    assert secret_key_bytes("whsec_" + padded.rstrip("=")) == key


def test_delivery_repr_never_shows_the_secret() -> None:
    secret = new_secret()
    assert secret not in repr(make_delivery([secret]))


# --- request shape ------------------------------------------------------------


def test_body_and_headers_match_the_documented_shape() -> None:
    secret = new_secret()
    now = datetime(2026, 11, 30, 1, 2, 3, 123456, tzinfo=UTC)
    headers, body = build_request(make_delivery([secret]), now)

    assert headers == {
        "content-type": "application/json",
        "webhook-id": RUN_ID,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature_header([secret], RUN_ID, int(now.timestamp()), body),
        "idempotency-key": RUN_ID,
        "user-agent": USER_AGENT,
        "accept-encoding": "identity",
    }
    assert USER_AGENT == "Punctual/0.1.0"
    assert headers["webhook-id"] == headers["idempotency-key"]

    document = json.loads(body)
    assert document == {
        "type": "job.fire",
        "timestamp": "2026-11-30T01:02:03.123456Z",
        "data": {
            "run_id": RUN_ID,
            "job_id": JOB_ID,
            "job_name": "Nightly report — café",
            "scheduled_at": "2026-11-30T01:00:00Z",
            "kind": "scheduled",
            "attempt": 2,
            "payload": {"report": "daily", "n": 3, "nested": {"ok": True}},
        },
    }
    assert document["data"]["run_id"] == headers["webhook-id"]


def test_body_is_compact_utf8_json() -> None:
    _, body = build_request(make_delivery([new_secret()]), SCHEDULED_AT)
    assert b", " not in body and b": " not in body
    assert "café".encode() in body  # not \u00e9 escapes


def test_times_are_converted_to_utc() -> None:
    plus_two = datetime(2026, 11, 30, 3, 0, tzinfo=UTC).astimezone(timezone(timedelta(hours=2)))
    delivery = make_delivery([new_secret()], scheduled_at=plus_two)
    headers, body = build_request(delivery, plus_two)
    document = json.loads(body)
    assert document["data"]["scheduled_at"] == "2026-11-30T03:00:00Z"
    assert document["timestamp"] == "2026-11-30T03:00:00Z"
    assert headers["webhook-timestamp"] == str(int(plus_two.timestamp()))


def test_every_attempt_of_a_run_keeps_the_same_identity() -> None:
    secret = new_secret()
    first, _ = build_request(make_delivery([secret], attempt=1), SCHEDULED_AT)
    later, _ = build_request(
        make_delivery([secret], attempt=3), SCHEDULED_AT + timedelta(minutes=5)
    )
    assert first["webhook-id"] == later["webhook-id"] == RUN_ID
    assert first["idempotency-key"] == later["idempotency-key"] == RUN_ID
    assert first["webhook-timestamp"] != later["webhook-timestamp"]


# --- is_public_address ------------------------------------------------------------

ADDRESSES = [
    ("127.0.0.1", False),
    ("127.255.255.254", False),
    ("10.0.0.1", False),
    ("10.255.255.255", False),
    ("172.16.0.1", False),
    ("172.31.255.255", False),
    ("172.32.0.1", True),
    ("192.168.1.1", False),
    ("169.254.169.254", False),
    ("169.254.0.1", False),
    ("100.64.0.1", False),
    ("100.127.255.255", False),
    ("0.0.0.0", False),
    ("0.1.2.3", False),
    ("224.0.0.1", False),
    ("239.255.255.250", False),
    ("240.0.0.1", False),
    ("255.255.255.255", False),
    ("198.18.0.1", False),
    ("192.0.2.1", False),
    ("198.51.100.7", False),
    ("203.0.113.9", False),
    ("192.0.0.8", False),
    ("::1", False),
    ("::", False),
    ("fe80::1", False),
    ("fe80::1%eth0", False),
    ("fc00::1", False),
    ("fd12:3456::1", False),
    ("ff02::1", False),
    ("2001:db8::1", False),
    ("::ffff:127.0.0.1", False),
    ("::ffff:10.0.0.1", False),
    ("::ffff:169.254.169.254", False),
    ("::127.0.0.1", False),  # IPv4-compatible form
    ("::10.0.0.1", False),
    ("64:ff9b::10.0.0.1", False),  # NAT64 embedding a private address
    ("2002:a00:1::", False),  # 6to4 embedding 10.0.0.1
    ("2002:7f00:1::", False),  # 6to4 embedding 127.0.0.1
    ("2001::1", False),  # Teredo
    ("8.8.8.8", True),
    ("1.1.1.1", True),
    ("93.184.215.14", True),
    ("::ffff:8.8.8.8", True),
    ("2001:4860:4860::8888", True),
    ("2606:4700:4700::1111", True),
]


@pytest.mark.parametrize(("address", "public"), ADDRESSES)
def test_is_public_address(address: str, public: bool) -> None:
    assert is_public_address(ipaddress.ip_address(address)) is public


# --- check_url -------------------------------------------------------------------


def resolver_that_fails(host: str) -> list[str]:
    raise AssertionError(f"must not resolve {host}")


def fake_dns(table: dict[str, list[str]]):
    asked: list[str] = []

    def resolve(host: str) -> list[str]:
        asked.append(host)
        if host not in table:
            raise OSError("NXDOMAIN")
        return table[host]

    resolve.asked = asked  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "gopher://example.com/",
        "data:text/plain,hi",
        "example.com/hook",
        "//example.com/hook",
        "http:///hook",
        "http://",
        "",
    ],
)
def test_only_http_and_https_urls_with_a_host_are_accepted(url: str) -> None:
    with pytest.raises(UnsafeTargetError):
        check_url_syntax(url)
    with pytest.raises(UnsafeTargetError):
        check_url(url, allow_private=True)


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pass@example.com/hook",
        "https://user@example.com/hook",
        "https://example.com@127.0.0.1/hook",
        "http://:@example.com/",
        "http://@example.com/",
    ],
)
def test_userinfo_is_refused(url: str) -> None:
    with pytest.raises(UnsafeTargetError, match="user name or password"):
        check_url_syntax(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com:0/",
        "http://example.com:65536/",
        "http://example.com:-1/",
        "http://example.com:http/",
        "http://exa mple.com/",
        "http://example.com/a b",
        "http://example.com\\@127.0.0.1/",
        "http://example.com/\r\nX-Injected: 1",
        "http://999.1.1.1/",
        "http://[::1/",
        "https://example.com/" + "a" * 2000,
    ],
)
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        check_url_syntax(url)


def test_a_url_of_exactly_2000_characters_is_accepted() -> None:
    url = "https://example.com/" + "a" * (2000 - len("https://example.com/"))
    assert len(url) == 2000
    check_url_syntax(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.1/",
        "http://0x7f000001/",
        "http://0x7f.0.0.1/",
        "http://0177.0.0.1/",
        "http://2130706433/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::127.0.0.1]/",
        "http://[fe80::1%25eth0]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://100.64.0.1/",
        "http://0.0.0.0:8000/",
        "http://10.1.2.3:8443/hook",
    ],
)
def test_literal_non_public_addresses_are_refused_in_any_spelling(url: str) -> None:
    with pytest.raises(UnsafeTargetError, match="non-public"):
        check_url(url, allow_private=False, resolve=resolver_that_fails)


def test_localhost_is_refused() -> None:
    # Resolved by the OS from its hosts file: no network needed.
    with pytest.raises(UnsafeTargetError, match="non-public"):
        check_url("http://localhost:8000/hook", allow_private=False)


def test_a_hostname_resolving_to_a_private_address_is_refused() -> None:
    resolve = fake_dns({"internal.example": ["10.0.0.5"]})
    with pytest.raises(UnsafeTargetError, match=r"non-public address \(10\.0\.0\.5\)"):
        check_url("https://internal.example/hook", allow_private=False, resolve=resolve)


def test_one_private_answer_among_public_ones_is_enough_to_refuse() -> None:
    resolve = fake_dns({"mixed.example": ["93.184.215.14", "169.254.169.254"]})
    with pytest.raises(UnsafeTargetError, match=r"169\.254\.169\.254"):
        check_url("https://mixed.example/hook", allow_private=False, resolve=resolve)


def test_a_hostname_resolving_to_public_addresses_is_accepted() -> None:
    resolve = fake_dns(
        {"receiver.example": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]}
    )
    check_url("https://receiver.example:8443/hook?x=1", allow_private=False, resolve=resolve)
    assert resolve.asked == ["receiver.example"]  # type: ignore[attr-defined]


def test_idna_hostnames_are_resolved_in_their_ascii_form() -> None:
    resolve = fake_dns({"xn--bcher-kva.example": ["93.184.215.14"]})
    check_url("https://bücher.example/hook", allow_private=False, resolve=resolve)
    assert resolve.asked == ["xn--bcher-kva.example"]  # type: ignore[attr-defined]


def test_an_idna_hostname_hiding_a_private_address_is_refused() -> None:
    resolve = fake_dns({"xn--bcher-kva.example": ["192.168.0.10"]})
    with pytest.raises(UnsafeTargetError, match="non-public"):
        check_url("https://BÜCHER.example/hook", allow_private=False, resolve=resolve)


def test_an_unresolvable_host_is_refused() -> None:
    with pytest.raises(UnsafeTargetError, match="could not resolve"):
        check_url("https://nowhere.example/", allow_private=False, resolve=fake_dns({}))
    with pytest.raises(UnsafeTargetError, match="could not resolve"):
        check_url(
            "https://empty.example/", allow_private=False, resolve=fake_dns({"empty.example": []})
        )


def test_allow_private_lifts_only_the_address_rule() -> None:
    check_url("http://127.0.0.1:8000/hook", allow_private=True, resolve=resolver_that_fails)
    check_url("http://localhost:8000/hook", allow_private=True, resolve=resolver_that_fails)
    check_url("http://10.0.0.5/hook", allow_private=True, resolve=resolver_that_fails)
    with pytest.raises(UnsafeTargetError):
        check_url("ftp://127.0.0.1/", allow_private=True)
    with pytest.raises(UnsafeTargetError):
        check_url("http://user:pw@127.0.0.1/", allow_private=True)


def test_a_public_literal_address_needs_no_dns() -> None:
    check_url("https://93.184.215.14/hook", allow_private=False, resolve=resolver_that_fails)
    check_url("https://[2606:4700:4700::1111]/", allow_private=False, resolve=resolver_that_fails)


def test_unsafe_target_error_is_a_value_error_with_a_readable_message() -> None:
    with pytest.raises(ValueError) as info:
        check_url("http://127.0.0.1/", allow_private=False)
    assert str(info.value) == "URL host is a non-public address (127.0.0.1)"


def test_signing_keeps_the_gil_beside_a_busy_thread() -> None:
    """The worker signs on its event loop while its database thread runs
    Python. A signature that gave up the GIL would wait for the busy thread
    to hand it back, a switch interval each time (0.2 s here: ten signatures
    would take 2 s). Holding it, they take microseconds."""
    key = secret_key_bytes(new_secret())
    stop = threading.Event()
    started = threading.Event()

    def busy() -> None:
        started.set()
        while not stop.is_set():
            pass

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.2)
    thread = threading.Thread(target=busy)
    try:
        thread.start()
        started.wait()
        t0 = time.monotonic()
        for n in range(10):
            sign(key, f"msg_{n}", 1_700_000_000, b'{"a": 1}')
        took = time.monotonic() - t0
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert took < 1.0, f"ten signatures took {took:.2f} s beside a busy thread"
