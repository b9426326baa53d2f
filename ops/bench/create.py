"""The ``create`` scenario: jobs created through the public API, over real
HTTP, against gunicorn (its own process, configured as the Procfile's web
process): single creates from one client and from several, and bulk creates
of up to 1,000 jobs per request; jobs/s, gunicorn's CPU per job,
PostgreSQL's CPU per single create (when the server is on this host), and a
check that every job got its schedule span and its audit event."""

from __future__ import annotations

import contextlib
import http.client
import json
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.db import connection

from jobs import crypto
from ops.bench import BenchFailed, processes
from ops.bench.figures import median_of
from ops.bench.scratch import bench_owner, reset

# A public address literal: the outbound-address rule judges it fully (no
# private targets allowed in this scenario) without a DNS lookup. Nothing
# connects to it: no dispatcher runs, and the jobs' first fires are an hour away.
CREATE_URL = "https://93.184.215.14/hook"
CREATE_JOB = {"interval_seconds": 3600, "url": CREATE_URL, "payload": {"bench": True}}


class _Client:
    """One API client on one kept connection (HTTP/1.1 keep-alive), as a
    script posting jobs in a loop is. It is the standard library's
    ``http.client``: the bench shares the machine's cores with the install,
    and ``requests`` spent 1.5 ms of CPU per request on its own side (0.4 ms
    here), which a single client's rate paid in full."""

    def __init__(self, base: str, token: str) -> None:
        self.conn = http.client.HTTPConnection(urlsplit(base).netloc, timeout=120)
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc) -> None:
        self.conn.close()

    def post_jobs(self, body) -> list | dict:
        self.conn.request("POST", "/api/v1/jobs/", body=json.dumps(body), headers=self.headers)
        answer = self.conn.getresponse()
        text = answer.read()
        if answer.status != 201:
            raise BenchFailed(f"create answered {answer.status}: {text[:500]!r}")
        return json.loads(text)


def _single_creates(base: str, token: str, names: list[str]) -> float:
    """Create one job per name, one request each, in order; seconds taken."""
    with _Client(base, token) as client:
        client.post_jobs({**CREATE_JOB, "name": f"{names[0]}-warm"})  # connection up
        t0 = time.perf_counter()
        for name in names:
            client.post_jobs({**CREATE_JOB, "name": name})
        return time.perf_counter() - t0


def _parallel_single_creates(base: str, token: str, prefix: str, clients: int, each: int) -> float:
    """``clients`` threads, each with its own connection, ``each`` creates each;
    seconds from the first request to the last answer."""
    import threading

    start = threading.Barrier(clients + 1)
    spans: list[tuple[float, float]] = []
    failures: list[BaseException] = []

    def client(k: int) -> None:
        try:
            with _Client(base, token) as api:
                api.post_jobs({**CREATE_JOB, "name": f"{prefix}-{k}-warm"})
                start.wait(timeout=120)
                t0 = time.perf_counter()
                for i in range(each):
                    api.post_jobs({**CREATE_JOB, "name": f"{prefix}-{k}-{i}"})
                spans.append((t0, time.perf_counter()))
        except BaseException as exc:  # reported below, after every thread ended
            failures.append(exc)
            start.abort()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        start.wait(timeout=120)
    for thread in threads:
        thread.join()
    if failures:
        raise BenchFailed(f"a client failed: {failures[0]!r}")
    return max(t1 for _, t1 in spans) - min(t0 for t0, _ in spans)


def _bulk_creates(base: str, token: str, prefix: str, batches: int, size: int) -> float:
    with _Client(base, token) as client:
        client.post_jobs([{**CREATE_JOB, "name": f"{prefix}-warm"}])
        t0 = time.perf_counter()
        for b in range(batches):
            body = [{**CREATE_JOB, "name": f"{prefix}-{b}-{i}"} for i in range(size)]
            created = client.post_jobs(body)
            if [job["name"] for job in created] != [job["name"] for job in body]:
                raise BenchFailed("a bulk create did not answer its jobs in input order")
            if any(not job["secret"].startswith(crypto.SECRET_PREFIX) for job in created):
                raise BenchFailed("a bulk create did not answer every secret")
        return time.perf_counter() - t0


# Every bench job has its open schedule span and its "created" event.
CREATE_CHECK = """
    SELECT count(*),
           count(*) FILTER (WHERE NOT EXISTS (
               SELECT 1 FROM jobs_schedulespan AS s WHERE s.job_id = j.id AND s.ended_at IS NULL)),
           count(*) FILTER (WHERE NOT EXISTS (
               SELECT 1 FROM jobs_jobevent AS e WHERE e.job_id = j.id AND e.action = 'created'))
    FROM jobs_job AS j WHERE j.owner_id = %s
"""


def scenario_create(
    *, singles: int, clients: int, batches: int, batch_size: int, repeat: int, force: bool
) -> dict:
    from accounts import tokens

    owner = bench_owner()
    one, many, bulk = [], [], []
    # gunicorn's CPU time per job created (the warm-up requests included):
    # less sensitive than the rates to other load on the machine.
    cpu_ms: dict[str, list[float]] = {"single": [], "bulk": []}
    # PostgreSQL's CPU time per single create (None when the server is elsewhere).
    postgres_ms: list[float] = []
    expected = 0
    with tempfile.TemporaryDirectory(prefix="punctual-bench-") as tmp_name:
        reset(force)
        # The bench owner is inactive between runs: it only exists to own bench jobs.
        get_user_model().objects.filter(pk=owner.pk).update(is_active=True)
        _, token = tokens.issue(owner)  # retires one left by an interrupted run
        gunicorn, base = processes.start_gunicorn(Path(tmp_name), workers=2, threads=4)
        try:
            each = max(1, singles // clients)
            for r in range(repeat):
                cpu, postgres = (
                    processes.tree_cpu_seconds(gunicorn.pid),
                    processes.postgres_cpu_seconds(),
                )
                seconds = _single_creates(base, token, [f"one-{r}-{i}" for i in range(singles)])
                one.append(singles / seconds)
                cpu_ms["single"].append(
                    1000 * (processes.tree_cpu_seconds(gunicorn.pid) - cpu) / singles
                )
                if postgres is not None:
                    used = (processes.postgres_cpu_seconds() or postgres) - postgres
                    postgres_ms.append(1000 * used / singles)
                seconds = _parallel_single_creates(base, token, f"many-{r}", clients, each)
                many.append(clients * each / seconds)
                cpu = processes.tree_cpu_seconds(gunicorn.pid)
                seconds = _bulk_creates(base, token, f"bulk-{r}", batches, batch_size)
                bulk.append(batches * batch_size / seconds)
                jobs_made = batches * batch_size
                cpu_ms["bulk"].append(
                    1000 * (processes.tree_cpu_seconds(gunicorn.pid) - cpu) / jobs_made
                )
                # The warm-up requests create a job each too.
                expected += singles + 1 + clients * (each + 1) + batches * batch_size + 1
        finally:
            processes.stop(gunicorn)
            tokens.revoke(owner)
            get_user_model().objects.filter(pk=owner.pk).update(is_active=False)
    with connection.cursor() as cur:
        cur.execute(CREATE_CHECK, [owner.pk])
        jobs, without_span, without_event = cur.fetchone()
    if (jobs, without_span, without_event) != (expected, 0, 0):
        raise BenchFailed(
            f"expected {expected} jobs, each with a span and an event; found {jobs} jobs,"
            f" {without_span} without a span, {without_event} without an event"
        )
    reset(force)
    return {
        "single_jobs_per_s_one_client": median_of(one),
        "single_ms_per_request_one_client": round(1000 / statistics.median(one), 2),
        f"single_jobs_per_s_{clients}_clients": median_of(many),
        "bulk_jobs_per_s": median_of(bulk),
        "bulk_ms_per_request": round(1000 * batch_size / statistics.median(bulk), 1),
        "gunicorn_cpu_ms_per_job": {k: round(statistics.median(v), 3) for k, v in cpu_ms.items()},
        "postgres_cpu_ms_per_single_create": (
            round(statistics.median(postgres_ms), 3) if postgres_ms else None
        ),
        "jobs_created": jobs,
        "runs": {
            "one_client": [round(x) for x in one],
            f"{clients}_clients": [round(x) for x in many],
            "bulk": [round(x) for x in bulk],
        },
    }
