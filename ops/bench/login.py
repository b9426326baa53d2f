"""The ``login`` scenario: health latency (p50, p99) against gunicorn, first
alone, then while C threads (default 8) post wrong passwords to the admin's
sign-in form; the answers by status, and a check that the sign-in limits
locked the threads out after at most the limit's worth of hashed passwords
(not part of ``all``)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from jobs import crypto
from ops.bench import BenchFailed, processes
from ops.bench.figures import percentile

LOGIN_USER = "punctual-bench-login"
# Health is probed this often, in both phases.
PROBE_EVERY = 0.05
# How long the hammering may take to reach its first lockout (every
# failure before it is hashed with the production hasher).
LOCKOUT_WITHIN = 120.0


def _forget_login_failures() -> None:
    """The sign-in failures the scenario leaves (or an interrupted run left):
    by its user name, and by the loopback address its clients post from."""
    from axes.models import AccessAttempt
    from django.db.models import Q

    AccessAttempt.objects.filter(Q(username=LOGIN_USER) | Q(ip_address="127.0.0.1")).delete()


BUSY = 0  # the key of the gate's answers among the statuses


def _hammer_login(base: str, stop, answers: dict[int, int], lock, failures: list) -> None:
    """One anonymous client: the sign-in form once, for its CSRF cookie, then
    wrong passwords for the bench's user until ``stop``; answers by status."""
    import requests

    url = f"{base}/admin/login/"
    try:
        with requests.Session() as session:
            session.get(url, timeout=120)
            form = {"username": LOGIN_USER, "csrfmiddlewaretoken": session.cookies["csrftoken"]}
            n = 0
            while not stop.is_set():
                n += 1
                answer = session.post(url, data={**form, "password": f"wrong-{n}"}, timeout=120)
                # 429 with Retry-After: 1 is the one-sign-in-at-a-time gate
                # (another post was being checked), not a lockout.
                busy = answer.status_code == 429 and answer.headers.get("Retry-After") == "1"
                key = BUSY if busy else answer.status_code
                with lock:
                    answers[key] = answers.get(key, 0) + 1
    except BaseException as exc:  # reported by the scenario, after every thread ended
        failures.append(exc)
        stop.set()


def _login_clients(base: str, clients: int, stop, locked, conn) -> None:
    """The sign-in clients' own process: ``clients`` threads of _hammer_login
    until ``stop``; ``locked`` is set once a lockout was answered, and the
    answers and failures go back over ``conn`` at the end.

    Apart from the bench's process, so that the health probes do not share a
    GIL (and a core's time slices) with eight busy client threads: what they
    measure is then the server's answer, not the bench's own queue."""
    import threading

    answers: dict[int, int] = {}
    failures: list[BaseException] = []
    lock, done = threading.Lock(), threading.Event()
    threads = [
        threading.Thread(target=_hammer_login, args=(base, done, answers, lock, failures))
        for _ in range(clients)
    ]
    for thread in threads:
        thread.start()
    while not stop.is_set() and not done.is_set():
        if 429 in answers:
            locked.set()
        stop.wait(0.05)
    done.set()
    for thread in threads:
        thread.join()
    conn.send((answers, [repr(f) for f in failures]))
    conn.close()


def _health_latencies(url: str, seconds: float, until=lambda: True) -> list[float]:
    """Probe ``url`` every PROBE_EVERY for ``seconds``, and on until ``until()``
    holds (at most LOCKOUT_WITHIN more); milliseconds per probe."""
    latencies: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end or not until():
        if time.monotonic() > end + LOCKOUT_WITHIN:
            raise BenchFailed(f"no sign-in was locked out within {LOCKOUT_WITHIN:.0f} s")
        latencies.append(processes.probe_ms(url))
        time.sleep(PROBE_EVERY)
    return latencies


def _latency_figures(values: list[float]) -> dict:
    return {
        "p50": round(percentile(values, 0.50), 1),
        "p99": round(percentile(values, 0.99), 1),
        "max": round(max(values, default=0.0), 1),
        "probes": len(values),
    }


def scenario_login(*, clients: int, duration: float, force: bool) -> dict:
    """Health latency while ``clients`` anonymous threads post wrong passwords
    to the admin's sign-in form, against gunicorn as the Procfile runs it
    (production password hashing): first ``duration`` seconds without them,
    then ``duration`` seconds with them.

    Every failure up to the limit is hashed; after it the clients' address
    (and the user name at it) is locked out, and the refusals cost no hash. The scenario checks
    that lockouts happened and that no more passwords were checked than the
    limit lets through (plus one in flight per thread)."""
    import multiprocessing

    user, _ = get_user_model().objects.get_or_create(
        username=LOGIN_USER, defaults={"is_active": False}
    )
    user.set_password(crypto.generate_secret())
    user.save(update_fields=["password"])
    _forget_login_failures()
    answers: dict[int, int] = {}
    failures: list[str] = []
    fork = multiprocessing.get_context("fork")
    stop, locked = fork.Event(), fork.Event()
    receive, send = fork.Pipe(duplex=False)
    with tempfile.TemporaryDirectory(prefix="punctual-bench-") as tmp_name:
        gunicorn, base = processes.start_gunicorn(Path(tmp_name), workers=2, threads=4)
        health = f"{base}/api/v1/health/"
        # The child gets no copy of an open database connection.
        connection.close()
        login = fork.Process(target=_login_clients, args=(base, clients, stop, locked, send))
        try:
            cpu = processes.tree_cpu_seconds(gunicorn.pid)
            idle = _health_latencies(health, duration)
            idle_cpu = processes.tree_cpu_seconds(gunicorn.pid) - cpu
            login.start()
            t0, cpu = time.monotonic(), processes.tree_cpu_seconds(gunicorn.pid)
            loaded = _health_latencies(
                health, duration, until=lambda: locked.is_set() or not login.is_alive()
            )
            loaded_cpu = processes.tree_cpu_seconds(gunicorn.pid) - cpu
            elapsed = time.monotonic() - t0
        finally:
            stop.set()
            if login.pid is not None:
                if receive.poll(120):
                    answers, failures = receive.recv()
                login.join(timeout=60)
            processes.stop(gunicorn)
            _forget_login_failures()
            user.delete()
    if failures:
        raise BenchFailed(f"a sign-in client failed: {failures[0]}")
    # A wrong password checked and answered with the form again: each one hashed.
    checked = answers.get(200, 0)
    limit = settings.AXES_FAILURE_LIMIT
    if checked > limit + clients:
        raise BenchFailed(f"{checked} wrong passwords were checked; the limit is {limit}")
    if not answers.get(429):
        raise BenchFailed(f"no sign-in was locked out: {answers}")
    unexpected = set(answers) - {200, 429, BUSY}
    if unexpected:
        raise BenchFailed(f"sign-in answered {sorted(unexpected)}: {answers}")
    posts = sum(answers.values())
    return {
        "failure_limit": limit,
        "health_ms_idle": _latency_figures(idle),
        "health_ms_under_login_load": _latency_figures(loaded),
        "login_posts": posts,
        "login_posts_per_s": round(posts / elapsed, 1),
        "answers": {str(status): n for status, n in sorted(answers.items()) if status != BUSY},
        "answered_with_the_form": checked,
        "locked_out": answers.get(429, 0),
        "busy": answers.get(BUSY, 0),
        "gunicorn_cpu_s": {"idle": round(idle_cpu, 2), "under_login_load": round(loaded_cpu, 2)},
    }
