"""A local webhook receiver for ``manage.py bench`` and the process tests.

It runs as its own process (``python -m ops.loopback_receiver``) so that
its CPU is measured apart from the worker's, and it writes one JSON line per
request to a log: the evidence the bench and the fault tests audit (duplicate
fires, lost fires, lag, overlap). Behaviour is chosen by path:

``/ok``               200 at once
``/status/<code>``    that status (``?retry_after=N`` adds a Retry-After header)
``/slow/<seconds>``   200 after a delay
``/hang``             never answers
``/trickle``          200, then one body byte every 0.5 s, forever
``/big``              200 with a 10 MB body
``/redirect``         302 to ``/ok`` on the same receiver
``/reset``            closes the connection without answering
``/malformed``        answers bytes that are not HTTP
``/flaky/<n>``        500 for the first n deliveries of a webhook-id, then 200
``/hold-first``       holds the first delivery of a webhook-id forever, 200 after
``/held``             holds every delivery until ``POST /release`` (at most an hour), then 200

Each request's ``start`` line holds what the fire auditor (ops/audit.py)
checks: ``t``, the arrival by this host's clock (seconds since the epoch,
before the body is read); the ``webhook_id`` header; and the ``job_id``,
``run_id``, ``attempt`` and ``scheduled_at`` from the body. Lean mode keeps
all of them.

``GET /stats`` answers the request count, the requests in flight now, the most
ever in flight, and the most in flight at once for any one job, after writing
the log out: a reader that asks first finds every request logged so far.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from collections import Counter
from pathlib import Path

from aiohttp import web


class Receiver:
    def __init__(self, log_path: str | None, lean: bool = False) -> None:
        # lean: log only what the bench audits (no headers, bodies or end
        # events), so the receiver's own CPU stays small next to the worker's.
        self.lean = lean
        self.log = open(log_path, "a", buffering=1 << 16) if log_path else None  # noqa: SIM115
        self.count = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.per_job: Counter[str] = Counter()
        self.max_per_job: Counter[str] = Counter()
        self.seen: Counter[str] = Counter()
        # Set by POST /release: lets a test count deliveries held open at once
        # for as long as it takes them all to arrive, however busy the machine.
        self.released = asyncio.Event()

    def record(self, **fields) -> None:
        if self.log:
            self.log.write(json.dumps(fields) + "\n")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        t_start = time.time()
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        webhook_id = headers.get("webhook-id", "")
        try:
            data = json.loads(body).get("data", {})
        except (ValueError, AttributeError):
            data = {}
        job_id = str(data.get("job_id", ""))
        self.count += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.per_job[job_id] += 1
        self.max_per_job[job_id] = max(self.max_per_job[job_id], self.per_job[job_id])
        self.seen[webhook_id] += 1
        entry = {
            "event": "start",
            "t": t_start,
            "path": request.path,
            "webhook_id": webhook_id,
            "job_id": job_id,
            "run_id": data.get("run_id"),
            "attempt": data.get("attempt"),
            "scheduled_at": data.get("scheduled_at"),
        }
        if not self.lean:
            entry["headers"] = headers
            entry["body"] = body.decode("utf-8", "replace")
        self.record(**entry)
        status = 0
        try:
            response = await self.respond(request, webhook_id)
            status = response.status
            return response
        finally:
            self.in_flight -= 1
            self.per_job[job_id] -= 1
            if not self.lean:
                self.record(event="end", t=time.time(), webhook_id=webhook_id, status=status)

    async def respond(  # noqa: C901 - one flat branch per path of the table above
        self, request: web.Request, webhook_id: str
    ) -> web.StreamResponse:
        parts = request.path.strip("/").split("/")
        kind = parts[0]
        if kind == "ok":
            return web.Response(text="ok")
        if kind == "status":
            headers = {}
            if "retry_after" in request.query:
                headers["Retry-After"] = request.query["retry_after"]
            return web.Response(status=int(parts[1]), text="status", headers=headers)
        if kind == "slow":
            await asyncio.sleep(float(parts[1]))
            return web.Response(text="slow ok")
        if kind == "hang":
            await asyncio.sleep(3600)
        if kind == "trickle":
            response = web.StreamResponse()
            await response.prepare(request)
            for _ in range(7200):
                await response.write(b".")
                await asyncio.sleep(0.5)
            return response
        if kind == "big":
            return web.Response(body=b"x" * (10 * 1024 * 1024))
        if kind == "redirect":
            return web.Response(status=302, headers={"Location": "/ok"})
        if kind == "reset":
            if request.transport is not None:  # None once the client has gone
                request.transport.abort()
            return web.Response(status=500)
        if kind == "malformed":
            if request.transport is not None:
                request.transport.write(b"NOT HTTP AT ALL\r\n\r\n")
                request.transport.close()
            return web.Response(status=500)
        if kind == "hold-first":
            if self.seen[webhook_id] <= 1:
                await asyncio.sleep(3600)
            return web.Response(text="ok")
        if kind == "held":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.released.wait(), 3600)
            return web.Response(text="released")
        if kind == "flaky":
            if self.seen[webhook_id] <= int(parts[1]):
                return web.Response(status=500, text="flaky")
            return web.Response(text="ok")
        return web.Response(status=404, text="unknown behaviour")

    async def stats(self, request: web.Request) -> web.Response:
        # A flush barrier too: every request that started before this one is
        # on disk when the answer arrives, so a reader (a test's audit) that
        # asks first never reads a log that is missing its last lines.
        if self.log:
            self.log.flush()
        return web.json_response(
            {
                "count": self.count,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "max_in_flight_per_job": max(self.max_per_job.values(), default=0),
            }
        )

    async def reset_stats(self, request: web.Request) -> web.Response:
        self.max_in_flight = self.in_flight
        self.max_per_job = Counter(self.per_job)
        return web.json_response({"ok": True})

    async def release(self, request: web.Request) -> web.Response:
        self.released.set()
        return web.json_response({"ok": True})


def make_app(log_path: str | None, lean: bool = False) -> web.Application:
    receiver = Receiver(log_path, lean)
    app = web.Application(client_max_size=1 << 20)
    app["receiver"] = receiver
    app.router.add_get("/stats", receiver.stats)
    app.router.add_post("/stats/reset", receiver.reset_stats)
    app.router.add_post("/release", receiver.release)
    app.router.add_post("/{tail:.*}", receiver.handle)

    async def flush(app):
        if receiver.log:
            receiver.log.close()

    app.on_cleanup.append(flush)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", help="JSON-lines log of every request")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    parser.add_argument("--lean", action="store_true", help="log no headers, bodies or ends")
    args = parser.parse_args()

    async def serve():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        runner = web.AppRunner(
            make_app(args.log, args.lean), access_log=None, handler_cancellation=True
        )
        await runner.setup()
        site = web.TCPSite(runner, args.host, args.port, backlog=4096)
        await site.start()
        port = runner.addresses[0][1]
        if args.port_file:
            tmp = Path(args.port_file + ".tmp")
            tmp.write_text(str(port))
            tmp.rename(args.port_file)
        receiver = runner.app["receiver"]
        while not stop.is_set():
            # Readers (tests, the bench) tail the log while we run.
            if receiver.log:
                receiver.log.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
        await runner.cleanup()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
