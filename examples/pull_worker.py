#!/usr/bin/env python3
"""A Punctual pull worker: claim due runs, heartbeat while working, complete.

    python examples/pull_worker.py --url https://punctual.example.com --token KEY
    python examples/pull_worker.py --url ... --token KEY --job JOB_ID --concurrency 4

Standard library only: copy this file next to your code and replace
``handle()`` with your work. It follows docs/guides/pull-worker.md
"What a pull worker should do":

- each thread claims one run at a time (``--job`` limits it to one job);
- while ``handle()`` works, a heartbeat every third of the lease keeps the
  run; a 409 to a heartbeat means the run is no longer ours, and its result
  is not reported;
- the outcome is reported with ``complete``: ``handle()`` returning is a
  success (its text is kept as the run's ``last_response``), ``WorkFailed``
  or any other exception a failure, retried by Punctual with the job's
  backoff unless ``retryable`` is false;
- a dropped connection, a timeout, a 429 or a 5xx is retried with
  exponential backoff and jitter (``Retry-After`` honoured), so a restart of
  Punctual's web processes costs a pause, not a lost run;
- a claim waits on the server (``wait_seconds``, ``--wait-seconds``, 25 s by
  default) until a run is due, and answers it at once: an empty answer
  means the wait ended, and the next claim goes out at once. With
  ``--wait-seconds 0`` (or a server that answers an empty claim early), it
  waits ``--poll-seconds`` (with jitter) before the next;
- SIGTERM or Ctrl-C stops claiming; the runs in hand are finished first (a
  claim waiting on the server is let finish too: up to ``--wait-seconds``).

A run can be delivered more than once (a lease lost to a slow network, a
worker killed after the work but before ``complete``): the run ``id`` stays
the same across its attempts, so make the work idempotent on it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

# Backoff after a failed call: 0.5 s, 1 s, 2 s, ... up to 30 s, each with jitter.
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
# Answers worth another try: the server was busy, restarting or rate-limiting.
RETRY_STATUSES = {408, 425, 429, 500, 502, 503, 504}
REQUEST_TIMEOUT = 30.0


class WorkFailed(Exception):
    """Raised by ``handle()`` for a failure; ``retryable=False`` for a
    permanent one (bad input: retrying cannot help)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class LeaseLost(Exception):
    """The run is no longer ours: another attempt has it, or its deadline passed."""


class Refused(Exception):
    """A 4xx other than 409: a bad token or request, which retrying cannot fix."""


@dataclass
class Run:
    id: str
    job_name: str
    attempt: int
    lease_seconds: int
    payload: dict[str, Any]


def handle(run: Run, lost: threading.Event) -> str:
    """The work. Replace this with yours.

    This demo reads its payload: ``{"sleep_seconds": 20}`` works for 20 s,
    ``{"fail": "message", "retryable": false}`` fails. ``lost`` is set if
    the run was lost meanwhile: long work can check it and stop early.
    Return a short text: it is kept as the run's ``last_response``.
    """
    if "fail" in run.payload:
        raise WorkFailed(str(run.payload["fail"]), retryable=run.payload.get("retryable", True))
    seconds = float(run.payload.get("sleep_seconds", 0))
    lost.wait(seconds)  # an interruptible sleep: stops early if the run was lost
    return f"{run.job_name}: slept {seconds:g} s"


class Api:
    """Punctual's pull API over HTTP, with retries and backoff."""

    def __init__(self, url: str, token: str, stopping: threading.Event) -> None:
        self.base = url.rstrip("/") + "/api/v1/runs/"
        self.token = token
        self.stopping = stopping

    def post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        give_up_after: float | None = None,
        stoppable: bool = False,
        server_wait: float = 0.0,
    ) -> Any:
        """POST ``body`` as JSON; the decoded answer. Retries what is worth
        retrying until it succeeds, or ``give_up_after`` seconds have passed
        (then the last error is raised), or, if ``stoppable``, the worker is
        stopping (then None). 409 raises LeaseLost, another 4xx Refused.
        ``server_wait``: how long the server may hold the request before it
        answers (a waiting claim), added to the request's timeout."""
        deadline = None if give_up_after is None else time.monotonic() + give_up_after
        delay = BACKOFF_FIRST
        while True:
            timeout = REQUEST_TIMEOUT + server_wait
            if deadline is not None:
                timeout = max(1.0, min(timeout, deadline - time.monotonic()))
            try:
                return self._post_once(path, body, timeout)
            except (OSError, _Retryable) as exc:  # URLError and timeouts are OSErrors
                wait = getattr(exc, "retry_after", None) or random.uniform(delay / 2, delay)
                if deadline is not None and time.monotonic() + wait > deadline:
                    raise
                log(f"{path}: {exc}; retrying in {wait:.1f} s")
                if stoppable and self.stopping.wait(wait):
                    return None
                if not stoppable:
                    time.sleep(wait)
                delay = min(delay * 2, BACKOFF_MAX)

    def _post_once(self, path: str, body: dict[str, Any], timeout: float) -> Any:
        request = urllib.request.Request(
            self.base + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "Authorization": f"Token {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")[:500]
            if exc.code == 409:
                raise LeaseLost(text) from None
            if exc.code in RETRY_STATUSES:
                raise _Retryable(exc.code, text, exc.headers.get("Retry-After")) from None
            raise Refused(f"{exc.code} {text}") from None


class _Retryable(Exception):
    def __init__(self, status: int, text: str, retry_after: str | None) -> None:
        super().__init__(f"{status} {text}")
        self.retry_after = float(retry_after) if retry_after and retry_after.isdigit() else None


class Worker:
    def __init__(self, api: Api, args: argparse.Namespace, stopping: threading.Event) -> None:
        self.api = api
        self.args = args
        self.stopping = stopping

    def loop(self) -> None:
        """Claim, work, complete, until told to stop."""
        while not self.stopping.is_set():
            started = time.monotonic()
            run = self.claim()
            if run is None:
                # After a wait on the server, claim again at once; after an
                # early empty answer (no wait asked, or the server did not
                # wait), poll, with jitter so that workers do not call in step.
                waited = time.monotonic() - started
                if not self.args.wait_seconds or waited < self.args.wait_seconds / 2:
                    self.stopping.wait(random.uniform(0.5, 1.5) * self.args.poll_seconds)
                continue
            self.work(run)

    def claim(self) -> Run | None:
        body: dict[str, Any] = {
            "worker": self.args.worker,
            "limit": 1,
            "lease_seconds": self.args.lease_seconds,
        }
        if self.args.wait_seconds:
            body["wait_seconds"] = self.args.wait_seconds
        if self.args.job:
            body["job"] = self.args.job
        # A claim whose answer was lost in a dropped connection comes back
        # after its lease: another claim takes the run, with the next attempt.
        claimed = self.api.post("claim/", body, stoppable=True, server_wait=self.args.wait_seconds)
        if not claimed:
            return None
        [item] = claimed
        log(f"claimed run {item['id']} of {item['job_name']} (attempt {item['attempt']})")
        return Run(
            id=item["id"],
            job_name=item["job_name"],
            attempt=item["attempt"],
            lease_seconds=self.args.lease_seconds,
            payload=item["payload"],
        )

    def work(self, run: Run) -> None:
        lost = threading.Event()
        done = threading.Event()
        beating = threading.Thread(target=self.heartbeat, args=(run, lost, done), daemon=True)
        beating.start()
        outcome: dict[str, Any]
        try:
            outcome = {"status": "succeeded", "response": handle(run, lost)}
        except WorkFailed as exc:
            outcome = {"status": "failed", "error": str(exc), "retryable": exc.retryable}
        except Exception as exc:  # any failure of the work is reported
            outcome = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
        finally:
            done.set()
            beating.join()
        if lost.is_set():
            log(f"run {run.id}: the lease was lost; its result is dropped")
            return
        self.complete(run, outcome)

    def heartbeat(self, run: Run, lost: threading.Event, done: threading.Event) -> None:
        """Every third of the lease until the work is done: two beats may fail
        (a dropped connection, a busy server) before the lease runs out."""
        interval = run.lease_seconds / 3
        while not done.wait(interval):
            try:
                # Give up on a beat before the next one is due: the next beat
                # is the retry, so retries never pile up behind each other.
                self.api.post(
                    f"{run.id}/heartbeat/",
                    {"attempt": run.attempt, "worker": self.args.worker},
                    give_up_after=interval,
                )
            except LeaseLost:
                lost.set()
                return
            except Refused as exc:
                log(f"run {run.id}: heartbeat refused ({exc})")
                return
            except (OSError, _Retryable) as exc:
                log(f"run {run.id}: heartbeat failed ({exc}); the next beat tries again")

    def complete(self, run: Run, outcome: dict[str, Any]) -> None:
        body = {"attempt": run.attempt, "worker": self.args.worker, **outcome}
        try:
            # Retried until the attempt's deadline could have passed: after it,
            # Punctual retries the run (same id) whatever we say.
            self.api.post(f"{run.id}/complete/", body, give_up_after=self.args.complete_within)
        except LeaseLost:
            # Also what a retried complete hears if the first one was applied
            # and only its answer was lost.
            log(f"run {run.id}: complete answered 409 (lease lost, or already completed)")
            return
        log(f"run {run.id}: {outcome['status']}")


def log(message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"{stamp} [{threading.current_thread().name}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A Punctual pull worker.")
    parser.add_argument("--url", required=True, help="Punctual's base URL, e.g. https://host")
    parser.add_argument(
        "--token",
        default=os.environ.get("PUNCTUAL_TOKEN"),
        help="API key (default: $PUNCTUAL_TOKEN)",
    )
    parser.add_argument("--job", help="claim runs of this job only (default: all your pull jobs)")
    parser.add_argument(
        "--worker",
        default=f"{socket.gethostname()}-{os.getpid()}",
        help="this worker's name, shown as the lease owner (default: host-pid)",
    )
    parser.add_argument("--concurrency", type=int, default=1, help="runs worked at once")
    parser.add_argument("--lease-seconds", type=int, default=30, help="5 to 3600 (default 30)")
    parser.add_argument(
        "--wait-seconds",
        type=int,
        default=25,
        choices=range(31),
        metavar="0..30",
        help="how long a claim waits on the server for a run (default 25; 0: poll)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=5.0,
        help="wait after an early empty claim (default 5)",
    )
    parser.add_argument(
        "--complete-within",
        type=float,
        default=300.0,
        help="keep retrying a complete this long (default 300 s)",
    )
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("--token (or PUNCTUAL_TOKEN) is required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        log("stopping: finishing the runs in hand")
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker = Worker(Api(args.url, args.token, stopping), args, stopping)
    failures: list[BaseException] = []

    def run_loop() -> None:
        try:
            worker.loop()
        except Refused as exc:
            log(f"refused: {exc}")
            failures.append(exc)
            stopping.set()

    threads = [
        threading.Thread(target=run_loop, name=f"worker-{n}") for n in range(args.concurrency)
    ]
    for thread in threads:
        thread.start()
    log(f"{args.worker}: working with {args.concurrency} thread(s)")
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(timeout=0.5)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
