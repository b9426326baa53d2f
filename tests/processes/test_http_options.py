"""A real ``manage.py work`` process calling endpoints that are not ours
(docs/guides/receiver.md "Calling any HTTP endpoint"): a receiver started
by the test accepts only the exact request it was told to expect, and
every request carries the Standard Webhooks signature over what it sent.
The worker's log, at DEBUG, never holds a credential or a header value."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from jobs.models import Job
from runs import job_verbs
from runs.models import Attempt, Run
from tests.integration.api.support import token_client
from tests.processes.conftest import process_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

TOKEN = "tok-4b1d-bearer-never-logged"
PASSWORD = "pw-90ce-basic-never-logged"
HEADER_VALUE = "hv-77aa-header-never-logged"
CRON_KEY = "k3y-in-the-query"
PAYLOAD = {"report": "daily", "rows": [1, 2, 3]}


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# What each path accepts: (method, Authorization, body check). Anything else
# is answered 401, as a real endpoint would.
EXPECTED = {
    f"/cron.php?key={CRON_KEY}": ("GET", f"Bearer {TOKEN}", lambda body: body == b""),
    "/basic": ("PUT", _basic("robot", PASSWORD), lambda body: json.loads(body)["type"]),
    "/payload": ("POST", None, lambda body: json.loads(body) == PAYLOAD),
    "/delete": ("DELETE", None, lambda body: body == b""),
}


class Endpoint(BaseHTTPRequestHandler):
    """Records every request, and answers 200 only to the expected one."""

    requests: list[dict] = []

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        seen = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
        }
        self.requests.append(seen)
        method, authorization, body_ok = EXPECTED.get(self.path, (None, None, None))
        ok = (
            method == self.command
            and self.headers.get("Authorization") == authorization
            and body_ok is not None
            and body_ok(body)
        )
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, format, *args) -> None:
        pass


@pytest.fixture
def endpoint():
    Endpoint.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _create(api, **job) -> tuple[Job, str]:
    answer = api.post("/api/v1/jobs/", {"interval_seconds": 3600, **job}, format="json")
    assert answer.status_code == 201, answer.json()
    return Job.objects.get(pk=answer.json()["id"]), answer.json()["secret"]


def _verify(secret: str, seen: dict) -> None:
    """Raises unless the request's signature covers exactly its body (an
    empty body is not JSON: the library is told not to parse it)."""
    Webhook(secret).verify(seen["body"], seen["headers"], json_parse=bool(seen["body"]))


def test_get_with_bearer_basic_auth_and_each_body_mode_reach_a_strict_endpoint_signed(
    owner, processes, endpoint, settings
):
    settings.PUNCTUAL_ALLOW_PRIVATE_TARGETS = True  # the endpoint is on loopback
    api = token_client(owner)
    cron, cron_secret = _create(
        api,
        name="cron.php",
        url=f"{endpoint}/cron.php?key={CRON_KEY}",
        method="GET",
        auth_kind="bearer",
        auth_token=TOKEN,
        headers={"X-Api-Key": HEADER_VALUE, "User-Agent": "cron-job"},
    )
    basic, basic_secret = _create(
        api,
        name="basic",
        url=f"{endpoint}/basic",
        method="PUT",
        auth_kind="basic",
        auth_username="robot",
        auth_password=PASSWORD,
    )
    raw, raw_secret = _create(
        api, name="payload", url=f"{endpoint}/payload", body_mode="payload", payload=PAYLOAD
    )
    delete, delete_secret = _create(api, name="delete", url=f"{endpoint}/delete", method="DELETE")
    # The wrong password: refused by the endpoint, so the worker logs a failure.
    wrong, _ = _create(
        api,
        name="wrong",
        url=f"{endpoint}/basic",
        method="PUT",
        auth_kind="basic",
        auth_username="robot",
        auth_password=PASSWORD + "-old",
        max_attempts=1,
    )
    jobs = {job.name: job for job in (cron, basic, raw, delete, wrong)}
    runs = {name: job_verbs.trigger(job) for name, job in jobs.items()}

    worker = processes.manage(
        "work", "--lease-seconds", "5", env=process_env(PUNCTUAL_LOG_LEVEL="DEBUG")
    )

    def all_finished():
        states = dict(
            Run.objects.filter(pk__in=[r.pk for r in runs.values()]).values_list(
                "job__name", "state"
            )
        )
        done = all(state in ("succeeded", "failed") for state in states.values())
        return states if done and len(states) == len(runs) else None

    states = wait_until(all_finished, timeout=60, message="every run to finish")
    assert states == {
        "cron.php": "succeeded",
        "basic": "succeeded",
        "payload": "succeeded",
        "delete": "succeeded",
        "wrong": "failed",
    }, list(Attempt.objects.values_list("run__job__name", "status_code", "error"))

    by_path: dict[str, list[dict]] = {}
    for seen in Endpoint.requests:
        by_path.setdefault(seen["path"], []).append(seen)

    # GET /cron.php?key=…: the query string as given, the Bearer token, the
    # job's own headers, no body and no content-type, signed over nothing.
    [get] = by_path[f"/cron.php?key={CRON_KEY}"]
    assert get["method"] == "GET" and get["body"] == b""
    headers = get["headers"]
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["x-api-key"] == HEADER_VALUE
    assert headers["user-agent"] == "cron-job"
    assert "content-type" not in headers
    assert headers["webhook-id"] == headers["idempotency-key"] == str(runs["cron.php"].pk)
    _verify(cron_secret, get)

    [put, _refused] = sorted(
        by_path["/basic"], key=lambda s: s["headers"]["authorization"] != _basic("robot", PASSWORD)
    )
    assert put["method"] == "PUT" and put["headers"]["content-type"] == "application/json"
    envelope = json.loads(put["body"])
    assert envelope["type"] == "job.fire" and envelope["data"]["run_id"] == str(runs["basic"].pk)
    _verify(basic_secret, put)

    [posted] = by_path["/payload"]
    assert posted["method"] == "POST" and json.loads(posted["body"]) == PAYLOAD
    assert "authorization" not in posted["headers"]
    _verify(raw_secret, posted)

    [deleted] = by_path["/delete"]
    assert deleted["method"] == "DELETE" and deleted["body"] == b""
    _verify(delete_secret, deleted)

    processes.stop(worker)
    log = Path(worker.log_path).read_text(errors="replace")
    assert "delivery failed" in log  # the log was written, failures included
    for secret in (TOKEN, PASSWORD, HEADER_VALUE, _basic("robot", PASSWORD).split()[1]):
        assert secret not in log
    for stored in Attempt.objects.values_list("error", "response"):
        assert not any(
            secret in text for text in stored for secret in (TOKEN, PASSWORD, HEADER_VALUE)
        )
