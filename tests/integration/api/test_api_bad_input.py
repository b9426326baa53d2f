"""Bad input gets a 4xx that names the field, and writes nothing (docs/guides/api.md
"Input rules").

One table, every row a request that must be refused: bounds and wrong types of
every field of the job, invalid and never-firing crons, zones, every spelling of a
private address, oversized and malformed bodies. Each answer is checked for
its status and for the field it names, and the tables are checked for nothing
written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from django.forms.models import model_to_dict

from jobs.models import IdempotencyKey, Job, JobEvent
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
VALID = {"name": "ok", "interval_seconds": 60, "url": PUBLIC_URL}
DROP = object()  # remove the key from VALID


@dataclass
class Raw:
    """A body sent as these exact bytes."""

    body: bytes
    content_type: str = "application/json"


def over(**changes) -> dict:
    body = {**VALID, **changes}
    return {k: v for k, v in body.items() if v is not DROP}


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


CASES = [
    # name
    (over(name=DROP), 400, "name"),
    (over(name=""), 400, "name"),
    (over(name="x" * 201), 400, "name"),
    (over(name=123), 400, "name"),
    (over(name=None), 400, "name"),
    (over(name="nul\u0000inside"), 400, "name"),
    (
        Raw(
            b'{"name": "lone \\ud800 half", "interval_seconds": 60, "url": "%s"}'
            % PUBLIC_URL.encode()
        ),
        400,
        "name",
    ),
    # description
    (over(description="d" * 2001), 400, "description"),
    (over(description=["a list"]), 400, "description"),
    # cron
    (over(cron="not a cron", interval_seconds=None), 400, "cron"),
    (over(cron="0 0 30 2 *", interval_seconds=None), 400, "cron"),
    (over(cron="0 0 31 4 *", interval_seconds=None), 400, "cron"),
    (over(cron="\u0663 * * * *", interval_seconds=None), 400, "cron"),  # Arabic-Indic 3
    (over(cron="\uff11 * * * *", interval_seconds=None), 400, "cron"),  # fullwidth 1
    (over(cron="0 0 * * * *", interval_seconds=None), 400, "cron"),
    (over(cron="60 * * * *", interval_seconds=None), 400, "cron"),
    (over(cron="@reboot", interval_seconds=None), 400, "cron"),
    (over(cron="H * * * *", interval_seconds=None), 400, "cron"),
    (over(cron="1" * 101, interval_seconds=None), 400, "cron"),
    (over(cron=5, interval_seconds=None), 400, "cron"),
    (over(cron="", interval_seconds=None), 400, "cron"),
    # exactly one of cron and interval_seconds
    (over(cron="@daily"), 400, "interval_seconds"),
    (over(interval_seconds=DROP), 400, "cron"),
    (over(interval_seconds=None, cron=None), 400, "interval_seconds"),
    # interval_seconds
    (over(interval_seconds=0), 400, "interval_seconds"),
    (over(interval_seconds=-5), 400, "interval_seconds"),
    (over(interval_seconds=31_536_001), 400, "interval_seconds"),
    (over(interval_seconds=10**30), 400, "interval_seconds"),
    (over(interval_seconds="60"), 400, "interval_seconds"),
    (over(interval_seconds=60.5), 400, "interval_seconds"),
    (over(interval_seconds=60.0), 400, "interval_seconds"),
    (over(interval_seconds=True), 400, "interval_seconds"),
    (
        Raw(b'{"name": "ok", "interval_seconds": NaN, "url": "https://93.184.215.14/"}'),
        400,
        "interval_seconds",
    ),
    (
        Raw(b'{"name": "ok", "interval_seconds": 1e400, "url": "https://93.184.215.14/"}'),
        400,
        "interval_seconds",
    ),
    (
        Raw(b'{"name": "ok", "interval_seconds": -Infinity, "url": "https://93.184.215.14/"}'),
        400,
        "interval_seconds",
    ),
    # timezone
    (over(timezone="Mars/Olympus_Mons"), 400, "timezone"),
    (over(timezone="utc"), 400, "timezone"),
    (over(timezone="europe/berlin"), 400, "timezone"),
    (over(timezone="../../etc/passwd"), 400, "timezone"),
    (over(timezone="localtime"), 400, "timezone"),
    (over(timezone=""), 400, "timezone"),
    (over(timezone=None), 400, "timezone"),
    # start_at
    (over(start_at="tomorrow"), 400, "start_at"),
    (over(start_at="2026-01-01T00:00:00"), 400, "start_at"),  # naive
    (over(start_at="2026-13-01T00:00:00Z"), 400, "start_at"),
    (over(start_at="0001-01-01T00:00:00+01:00"), 400, "start_at"),
    (over(start_at="9999-12-31T23:59:59Z"), 400, "start_at"),
    (over(start_at=1767225600), 400, "start_at"),
    # run_at (a one-off: instead of cron and interval_seconds)
    (over(interval_seconds=None, run_at="tomorrow"), 400, "run_at"),
    (over(interval_seconds=None, run_at="2027-01-01T00:00:00"), 400, "run_at"),  # naive
    (over(interval_seconds=None, run_at=1767225600), 400, "run_at"),
    (over(interval_seconds=None, run_at="9999-12-31T23:59:59Z"), 400, "run_at"),
    (over(run_at="2027-01-01T00:00:00Z"), 400, "run_at"),  # and an interval
    (over(interval_seconds=None, cron="@daily", run_at="2027-01-01T00:00:00Z"), 400, "run_at"),
    (
        over(interval_seconds=None, run_at="2027-01-01T00:00:00Z", start_at="2026-12-01T00:00Z"),
        400,
        "start_at",
    ),
    # end_at
    (over(end_at="never"), 400, "end_at"),
    (over(end_at="2027-01-01T00:00:00"), 400, "end_at"),  # naive
    (over(end_at=["2027-01-01T00:00:00Z"]), 400, "end_at"),
    (over(start_at="2027-01-01T00:00:00Z", end_at="2027-01-01T00:00:00Z"), 400, "end_at"),
    (over(start_at="2027-01-01T00:00:00Z", end_at="2026-01-01T00:00:00Z"), 400, "end_at"),
    (
        over(interval_seconds=None, run_at="2027-01-01T00:00:00Z", end_at="2026-12-31T00:00Z"),
        400,
        "end_at",
    ),
    # target_kind and url
    (over(target_kind="email"), 400, "target_kind"),
    (over(url=DROP), 400, "url"),
    (over(url=""), 400, "url"),
    (over(url=42), 400, "url"),
    (over(url="ftp://93.184.215.14/"), 400, "url"),
    (over(url="file:///etc/passwd"), 400, "url"),
    (over(url="javascript:alert(1)"), 400, "url"),
    (over(url="gopher://93.184.215.14:70/"), 400, "url"),
    (over(url="93.184.215.14/hook"), 400, "url"),
    (over(url="https://user:secret@93.184.215.14/"), 400, "url"),
    (over(url="https://93.184.215.14@127.0.0.1/"), 400, "url"),
    (over(url="https://93.184.215.14:99999/"), 400, "url"),
    (over(url="https://93.184.215.14/" + "a" * 2000), 400, "url"),
    (over(url="http://127.0.0.1/"), 400, "url"),
    (over(url="http://127.1/"), 400, "url"),
    (over(url="http://0x7f000001/"), 400, "url"),
    (over(url="http://2130706433/"), 400, "url"),
    (over(url="http://0177.0.0.1/"), 400, "url"),
    (over(url="http://0.0.0.0/"), 400, "url"),
    (over(url="http://[::1]/"), 400, "url"),
    (over(url="http://[::ffff:127.0.0.1]/"), 400, "url"),
    (over(url="http://[::ffff:7f00:1]/"), 400, "url"),
    (over(url="http://[::ffff:10.0.0.1]/"), 400, "url"),
    (over(url="http://localhost:8000/"), 400, "url"),
    (
        over(url="http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/"),
        400,
        "url",
    ),  # IDNA
    (over(url="http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/"), 400, "url"),  # IDNA digits
    (over(url="http://169.254.169.254/latest/meta-data/"), 400, "url"),
    (over(url="http://10.0.0.1/"), 400, "url"),
    (over(url="http://192.168.1.1/"), 400, "url"),
    (over(url="http://100.64.0.1/"), 400, "url"),
    (over(url="http://224.0.0.1/"), 400, "url"),
    (over(url="http://[fe80::1]/"), 400, "url"),
    (over(url="http://unresolvable.invalid/"), 400, "url"),
    (over(url="https://93.184.215.14/\\..\\"), 400, "url"),
    # payload
    (over(payload={"blob": "x" * (64 * 1024)}), 400, "payload"),
    (over(payload={"blob": "\u00e9" * (33 * 1024)}), 400, "payload"),  # 66 KiB in UTF-8
    (over(payload=[1, 2]), 400, "payload"),
    (over(payload="a string"), 400, "payload"),
    (over(payload=None), 400, "payload"),
    (over(payload={"k": "nul\u0000"}), 400, "payload"),
    (over(payload={"nul\u0000key": 1}), 400, "payload"),
    (over(payload=nested(40)), 400, "payload"),
    (
        Raw(
            b'{"name": "ok", "interval_seconds": 60, "url": "https://93.184.215.14/",'
            b' "payload": {"x": NaN}}'
        ),
        400,
        "payload",
    ),
    (
        Raw(
            b'{"name": "ok", "interval_seconds": 60, "url": "https://93.184.215.14/",'
            b' "payload": {"x": "\\udfff"}}'
        ),
        400,
        "payload",
    ),
    # delivery and policy bounds
    (over(timeout_seconds=0), 400, "timeout_seconds"),
    (over(timeout_seconds=901), 400, "timeout_seconds"),
    (over(timeout_seconds="30"), 400, "timeout_seconds"),
    (over(max_attempts=0), 400, "max_attempts"),
    (over(max_attempts=21), 400, "max_attempts"),
    (over(retry_backoff_seconds=0), 400, "retry_backoff_seconds"),
    (over(retry_backoff_seconds=3601), 400, "retry_backoff_seconds"),
    (over(misfire_policy="never"), 400, "misfire_policy"),
    (over(misfire_policy=1), 400, "misfire_policy"),
    (over(max_catchup=0), 400, "max_catchup"),
    (over(max_catchup=101), 400, "max_catchup"),
    (over(misfire_grace_seconds=0), 400, "misfire_grace_seconds"),
    (over(misfire_grace_seconds=86_401), 400, "misfire_grace_seconds"),
    (over(overlap_policy="parallel"), 400, "overlap_policy"),
    (over(jitter_seconds=-1), 400, "jitter_seconds"),
    (over(jitter_seconds=3601), 400, "jitter_seconds"),
    (over(pause_after_failures=0), 400, "pause_after_failures"),
    (over(pause_after_failures="3"), 400, "pause_after_failures"),
    # read-only and unknown fields
    (over(state="paused"), 400, "state"),
    (over(version=99), 400, "version"),
    (over(secret="whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), 400, "secret"),
    (over(id="00000000-0000-0000-0000-000000000000"), 400, "id"),
    (over(next_fire_at="2026-01-01T00:00:00Z"), 400, "next_fire_at"),
    (over(consecutive_failures=0), 400, "consecutive_failures"),
    (over(owner="bob"), 400, "owner"),
    (over(created_at="2026-01-01T00:00:00Z"), 400, "created_at"),
    (over(pause_note="sneaky"), 400, "pause_note"),
    (over(intervall=60), 400, "intervall"),
    # bodies that are not a JSON object
    (Raw(b"name=ok&interval_seconds=60"), 400, "detail"),
    (Raw(b'{"name": "ok",'), 400, "detail"),
    (Raw(b""), 400, "name"),
    (Raw(b"[]"), 400, "non_field_errors"),
    (Raw(b"null"), 400, "non_field_errors"),
    (Raw(b'"just a string"'), 400, "non_field_errors"),
    (Raw(b'{"name": "\xff\xfe"}'), 400, "detail"),  # not UTF-8
    (Raw(b'{"name": "a", "name": "b"}'), 400, "detail"),
    (Raw(b"[" * 100_000 + b"]" * 100_000), 400, "detail"),
    (Raw(b'{"payload": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001), 400, "detail"),
    (Raw(b'{"name": "' + b"x" * (1024 * 1024) + b'"}'), 413, "detail"),
    (Raw(b"name=ok", "application/x-www-form-urlencoded"), 415, "detail"),
    (Raw(b'{"name": "ok"}', "text/plain"), 415, "detail"),
    (Raw(b'{"name": "ok"}', ""), 415, "detail"),
]


def _id(case) -> str:
    _body, status, field = case
    return f"{field}-{status}"


def send(client, method: str, path: str, body, headers=None):
    headers = headers or {}
    if isinstance(body, Raw):
        return client.generic(method, path, body.body, content_type=body.content_type, **headers)
    return client.generic(
        method, path, json.dumps(body), content_type="application/json", **headers
    )


def counts() -> tuple[int, int, int]:
    return Job.objects.count(), JobEvent.objects.count(), IdempotencyKey.objects.count()


def test_the_table_is_big_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize("body,status,field", CASES, ids=[_id(c) for c in CASES])
def test_bad_create_is_refused_naming_the_field_and_writes_nothing(api, body, status, field):
    before = counts()
    answer = send(api, "POST", JOBS, body, {"HTTP_IDEMPOTENCY_KEY": "bad-input"})
    assert answer.status_code == status, answer.content[:300]
    assert answer["Content-Type"] == "application/json"
    data = answer.json()
    assert field in data, data
    assert all(isinstance(m, str) and m for m in _messages(data[field]))
    assert counts() == before


def _messages(value) -> list:
    return value if isinstance(value, list) else [value]


PATCH_CASES = [
    ({"interval_seconds": 0}, "interval_seconds"),
    ({"cron": "0 0 30 2 *", "interval_seconds": None}, "cron"),
    ({"cron": "@daily"}, "interval_seconds"),
    ({"interval_seconds": None}, "cron"),
    ({"timezone": "../../etc/passwd"}, "timezone"),
    ({"run_at": "2027-01-01T00:00:00Z"}, "run_at"),
    ({"interval_seconds": None, "run_at": "soon"}, "run_at"),
    (
        {
            "interval_seconds": None,
            "run_at": "2027-01-01T00:00:00Z",
            "start_at": "2026-01-01T00:00:00Z",
        },
        "start_at",
    ),
    ({"end_at": "2020-01-01T00:00:00Z", "start_at": "2021-01-01T00:00:00Z"}, "end_at"),
    ({"end_at": "2027-01-01T00:00:00"}, "end_at"),
    ({"url": "http://127.1/"}, "url"),
    ({"url": ""}, "url"),
    ({"payload": {"blob": "x" * (64 * 1024)}}, "payload"),
    ({"name": "taken"}, "name"),
    ({"state": "paused"}, "state"),
    ({"version": 1}, "version"),
    ({"secret": "whsec_x"}, "secret"),
    ({"max_attempts": 21, "description": "would be valid"}, "max_attempts"),
]


@pytest.mark.parametrize("body,field", PATCH_CASES, ids=[f for _, f in PATCH_CASES])
def test_bad_patch_is_refused_and_leaves_the_job_unchanged(api, owner, body, field):
    make_job(owner, name="taken")
    job = make_job(owner, name="mine", url=PUBLIC_URL)
    snapshot = model_to_dict(Job.objects.get(pk=job.pk))
    before = counts()
    for method in ("PATCH", "PUT"):
        full = body if method == "PATCH" else {**VALID, "name": "mine", **body}
        answer = send(api, method, f"{JOBS}{job.pk}/", full)
        assert answer.status_code == 400, (method, answer.content[:300])
        assert field in answer.json()
    assert model_to_dict(Job.objects.get(pk=job.pk)) == snapshot
    assert counts() == before
