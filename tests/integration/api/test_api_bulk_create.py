"""Bulk create: POST /api/v1/jobs/ with a JSON list of up to 1,000 jobs.

All or nothing, in one transaction; each item validated exactly as a single
create; errors named by index, then field; spans and audit events written for
every job in one statement each; secrets answered once, in input order.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.db import db_now
from jobs import crypto, targets
from jobs.models import IdempotencyKey, Job, JobEvent, ScheduleSpan
from tests.factories import make_job
from tests.integration.api.support import PUBLIC_URL, token_client

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def item(name: str, **fields) -> dict:
    return {"name": name, "interval_seconds": 60, "url": PUBLIC_URL, **fields}


def counts() -> tuple[int, int, int, int]:
    return (
        Job.objects.count(),
        ScheduleSpan.objects.count(),
        JobEvent.objects.count(),
        IdempotencyKey.objects.count(),
    )


def post(api, body, **headers):
    return api.generic("POST", JOBS, json.dumps(body), content_type="application/json", **headers)


def test_a_list_creates_every_job_in_order_with_spans_events_and_secrets(api, owner):
    body = [
        item("b-second"),
        item("a-first", cron="0 2 * * *", interval_seconds=None, timezone="Europe/Berlin"),
        item("c-pull", target_kind="pull", url="", payload={"k": [1, 2]}),
    ]
    answer = post(api, body)
    assert answer.status_code == 201, answer.json()
    created = answer.json()
    assert [job["name"] for job in created] == ["b-second", "a-first", "c-pull"]
    assert created[1]["cron"] == "0 2 * * *" and created[2]["payload"] == {"k": [1, 2]}
    secrets = [job["secret"] for job in created]
    assert all(s.startswith("whsec_") for s in secrets) and len(set(secrets)) == 3
    now = db_now()
    for job in created:
        stored = Job.objects.get(pk=job["id"])
        assert stored.owner == owner and stored.state == "active" and stored.next_fire_at
        assert stored.signing_secrets(now) == [job["secret"]]
        assert job["secret"] not in stored.secret_encrypted
        [span] = ScheduleSpan.objects.filter(job=stored)
        assert span.ended_at is None and span.state == "active" and span.anchor == stored.created_at
        assert (span.cron, span.interval_seconds) == (stored.cron, stored.interval_seconds)
        [event] = JobEvent.objects.filter(job=stored)
        assert (event.action, event.channel, event.actor) == ("created", "api", owner)
        assert event.changes["name"] == job["name"]
        assert job["secret"] not in json.dumps(event.changes)
    # Shown once: nowhere else afterwards.
    listed = api.get(JOBS).json()["results"]
    assert len(listed) == 3 and all("secret" not in job for job in listed)
    assert all(s not in str(api.get(f"{JOBS}{created[0]['id']}/").json()) for s in secrets)


def test_a_list_of_one_answers_a_list(api):
    answer = post(api, [item("only")])
    assert answer.status_code == 201
    [job] = answer.json()
    assert job["name"] == "only" and job["secret"].startswith("whsec_")


def test_the_statements_do_not_grow_with_the_list(api, unlimited):
    """Set-based: the name check, the jobs, their spans and their events are
    one statement each, whatever the number of jobs."""
    api.get(JOBS)  # the token's last use is written once a minute: now
    with CaptureQueriesContext(connection) as two:
        assert post(api, [item(f"two-{i}") for i in range(2)]).status_code == 201
    with CaptureQueriesContext(connection) as fifty:
        assert post(api, [item(f"fifty-{i}") for i in range(50)]).status_code == 201
    assert len(fifty.captured_queries) == len(two.captured_queries)
    assert Job.objects.count() == ScheduleSpan.objects.count() == JobEvent.objects.count() == 52


def test_a_single_create_makes_no_savepoint_and_no_wasted_query(api, unlimited):
    """The token; the clock, the owner's limits and the name check in one
    statement; then one insert: the owner's lock with their live jobs count,
    and the job, its span and its event. The token's first use of the minute
    also writes its last_used_at: made beforehand."""
    assert api.get("/api/v1/jobs/").status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert post(api, item("single")).status_code == 201
    sql = [q["sql"] for q in queries.captured_queries]
    assert not [s for s in sql if "SAVEPOINT" in s], sql
    assert not [s for s in sql if "runs_run" in s], sql  # a new job has no last run
    assert len(sql) <= 3, sql


@pytest.mark.django_db(transaction=True)
def test_a_single_create_is_one_statement_outside_any_transaction(api, unlimited):
    """Its insert checks the limit under the owner's lock itself, so it runs
    alone, in autocommit: no BEGIN and COMMIT round trips around it (its
    session has JIT off: core/db.py hot_statement). In a transaction (an
    Idempotency-Key's), it joins that one."""
    seen: list[tuple[str, bool]] = []

    def note(execute, sql, params, many, context):
        seen.append((sql, connection.in_atomic_block))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(note):
        assert post(api, item("alone")).status_code == 201
        assert post(api, item("keyed"), HTTP_IDEMPOTENCY_KEY="keyed").status_code == 201
    inserts = [in_block for sql, in_block in seen if "INSERT INTO jobs_live_jobs" in sql]
    assert inserts == [False, True], seen
    assert Job.objects.filter(name__in=["alone", "keyed"]).count() == 2
    assert ScheduleSpan.objects.count() == JobEvent.objects.count() == 2


def test_one_invalid_item_refuses_the_list_naming_index_and_field(api):
    before = counts()
    body = [
        item("fine-0"),
        item("bad-cron", cron="0 0 30 2 *", interval_seconds=None),
        item("fine-2"),
        item("bad-url", url="http://127.0.0.1/hook"),
    ]
    answer = post(api, body, HTTP_IDEMPOTENCY_KEY="bulk-bad")
    assert answer.status_code == 400
    errors = answer.json()
    assert set(errors) == {"1", "3"}
    assert list(errors["1"]) == ["cron"] and list(errors["3"]) == ["url"]
    assert all(isinstance(m, str) and m for m in errors["1"]["cron"] + errors["3"]["url"])
    assert counts() == before


def test_each_item_gets_the_single_create_s_errors(api):
    """The same serializer, so the same messages, for the same bodies."""
    bad = [
        item("a", interval_seconds=0),
        item("b", payload={"blob": "x" * (64 * 1024)}),
        item("c", intervall=5),
        item("d", secret="whsec_mine"),
        {"interval_seconds": 60, "url": PUBLIC_URL},
        item("f", timeout_seconds="30"),
    ]
    before = counts()
    answer = post(api, bad)
    assert answer.status_code == 400
    errors = answer.json()
    for index, body in enumerate(bad):
        single = post(api, body)
        assert single.status_code == 400
        assert errors[str(index)] == single.json()
    assert counts() == before


def test_names_must_be_free_and_unique_within_the_list(api, owner, other_owner):
    make_job(owner, name="taken")
    make_job(other_owner, name="theirs")
    before = counts()
    answer = post(api, [item("new"), item("taken"), item("theirs"), item("new"), item(" new ")])
    assert answer.status_code == 400
    errors = answer.json()
    assert set(errors) == {"1", "3", "4"}
    assert errors["1"] == {"name": ["You already have a job with this name."]}
    assert "Item 0" in errors["3"]["name"][0] and "Item 0" in errors["4"]["name"][0]
    assert counts() == before
    # Another owner's name is free for this one, as for a single create.
    assert post(api, [item("new"), item("theirs")]).status_code == 201


def test_a_list_over_1000_items_is_refused_naming_the_limit(api):
    before = counts()
    answer = post(api, [item(f"j-{i}") for i in range(1001)])
    assert answer.status_code == 400
    [message] = answer.json()["non_field_errors"]
    assert "1,000" in message and "1,001" in message
    assert counts() == before


def test_a_list_of_1000_items_is_created(api):
    answer = post(api, [item(f"j-{i}") for i in range(1000)])
    assert answer.status_code == 201
    assert [job["name"] for job in answer.json()] == [f"j-{i}" for i in range(1000)]
    assert Job.objects.count() == ScheduleSpan.objects.count() == JobEvent.objects.count() == 1000


def test_an_empty_list_is_refused(api):
    answer = post(api, [])
    assert answer.status_code == 400
    assert answer.json()["non_field_errors"]
    assert counts() == (0, 0, 0, 0)


def test_a_list_of_non_objects_is_refused_naming_each_index(api):
    answer = post(api, [item("fine"), 1, "job", None, [item("nested")], True])
    assert answer.status_code == 400
    errors = answer.json()
    assert set(errors) == {"1", "2", "3", "4", "5"}
    assert all(list(e) == ["non_field_errors"] for e in errors.values())
    assert counts() == (0, 0, 0, 0)


DEEP = b'{"a":' * 40 + b"1" + b"}" * 40


@pytest.mark.parametrize(
    "raw,field",
    [
        (b'[{"name": "a", "interval_seconds": 60, "payload": {"x": NaN}}]', "payload"),
        (b'[{"name": "a", "interval_seconds": 60, "description": "nul\\u0000"}]', "description"),
        (b'[{"name": "a", "interval_seconds": 60, "payload": %s}]' % DEEP, "payload"),
    ],
    ids=["nan", "nul", "too-deep"],
)
def test_the_strict_parser_names_the_index_and_field_in_a_list(api, raw, field):
    answer = api.generic("POST", JOBS, raw, content_type="application/json")
    assert answer.status_code == 400
    assert list(answer.json()) == ["0"] and list(answer.json()["0"]) == [field]
    assert counts() == (0, 0, 0, 0)


def test_the_body_size_limit_holds_for_a_list(api):
    body = [item(f"j-{i}", payload={"blob": "x" * 2000}) for i in range(600)]
    answer = post(api, body)
    assert answer.status_code == 413
    assert counts() == (0, 0, 0, 0)


def test_one_dns_lookup_per_host_for_the_whole_list(api, monkeypatch):
    looked_up = []

    def resolve(host: str) -> list[str]:
        looked_up.append(host)
        if host == "receiver.example.com":
            return ["93.184.215.14"]
        raise OSError("no such host")

    monkeypatch.setattr(targets, "system_resolve", resolve)
    body = [item(f"j-{i}", url=f"https://receiver.example.com/hook/{i}") for i in range(20)]
    assert post(api, body).status_code == 201
    assert looked_up == ["receiver.example.com"]
    # A host that does not resolve fails every item that names it, by index.
    looked_up.clear()
    body = [item(f"k-{i}", url="https://nowhere.example.com/") for i in range(3)]
    answer = post(api, [item("fine", url="https://receiver.example.com/"), *body])
    assert answer.status_code == 400 and set(answer.json()) == {"1", "2", "3"}
    assert sorted(looked_up) == ["nowhere.example.com", "receiver.example.com"]


def test_a_bulk_create_replays_with_its_idempotency_key(api):
    body = [item("k-0"), item("k-1")]
    first = post(api, body, HTTP_IDEMPOTENCY_KEY="batch-7")
    again = post(api, body, HTTP_IDEMPOTENCY_KEY="batch-7")
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()  # the same jobs, with the same secrets
    assert Job.objects.count() == 2 and JobEvent.objects.count() == 2
    stored = IdempotencyKey.objects.get()
    assert all(job["secret"] not in stored.response_encrypted for job in first.json())
    assert "whsec_" not in crypto.decrypt(stored.response_encrypted)
    # The key names the whole list: another list, or one of its items alone, is a 422.
    assert post(api, [item("k-0")], HTTP_IDEMPOTENCY_KEY="batch-7").status_code == 422
    assert post(api, item("k-0"), HTTP_IDEMPOTENCY_KEY="batch-7").status_code == 422


@pytest.mark.parametrize("change", ["delete", "rotate"])
def test_a_bulk_replay_after_one_of_its_jobs_changed_is_a_409_naming_it(api, change):
    """Any job of the list deleted, or its secret rotated, since the first
    answer: the list is not replayed, and no secret is shown."""
    body = [item("m-0"), item("m-1"), item("m-2")]
    first = post(api, body, HTTP_IDEMPOTENCY_KEY="batch-8").json()
    changed = first[1]["id"]
    if change == "delete":
        assert api.delete(f"{JOBS}{changed}/").status_code == 204
    else:
        assert api.post(f"{JOBS}{changed}/rotate-secret/").status_code == 200
    again = post(api, body, HTTP_IDEMPOTENCY_KEY="batch-8")
    assert again.status_code == 409
    detail = again.json()["detail"]
    assert f"created job {changed}, " in detail
    assert ("deleted" if change == "delete" else "rotated") in detail
    assert first[0]["id"] not in detail and first[2]["id"] not in detail
    assert "whsec_" not in again.content.decode()
    assert Job.objects.count() == 3


def test_a_refused_bulk_create_does_not_use_up_its_key(api):
    bad = post(api, [item("a"), item("b", interval_seconds=0)], HTTP_IDEMPOTENCY_KEY="k")
    assert bad.status_code == 400 and not IdempotencyKey.objects.exists()
    fixed = post(api, [item("a"), item("b")], HTTP_IDEMPOTENCY_KEY="k")
    assert fixed.status_code == 201 and Job.objects.count() == 2


def test_concurrent_bulk_creates_of_one_name_make_one_list_and_a_400(transactional_db, owner):
    """Both lists may pass the name check before either commits: the unique
    constraint decides, and the loser's 400 names the clashing item's index."""
    clients = [token_client(owner) for _ in range(4)]
    start = threading.Barrier(len(clients))
    answers = []

    def create(k, client):
        try:
            start.wait(timeout=10)
            body = [item(f"own-{k}-{i}") for i in range(20)] + [item("contested")]
            answer = post(client, body)
            answers.append((answer.status_code, answer.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(k, c)) for k, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(status for status, _ in answers) == [201, 400, 400, 400]
    for status, body in answers:
        if status == 400:
            assert body == {"20": {"name": ["You already have a job with this name."]}}
    assert Job.objects.count() == 21
    assert ScheduleSpan.objects.count() == JobEvent.objects.count() == 21
