"""A plain asyncio webhook receiver for ``manage.py bench e2e --receiver plain``.

The bench's usual receiver (ops/loopback_receiver.py) is an aiohttp app.
This one is what a small hand-written receiver looks like: an
``asyncio.Protocol`` that speaks just enough HTTP/1.1 (keep-alive,
``Content-Length`` bodies), parses every JSON body as a real receiver would,
and answers ``200 ok``. It logs the same ``start`` lines as the aiohttp
receiver (``t``, ``webhook_id``, ``job_id``, ``run_id``, ``attempt``,
``scheduled_at``), so the bench audits both the same way. Nothing else: no
paths, no stats, no slow answers.

    python -m ops.plain_receiver --log receiver.jsonl --port-file port
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from pathlib import Path

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
MAX_HEAD = 64 * 1024
MAX_BODY = 1 << 20


class Request(asyncio.Protocol):
    """One connection: requests parsed from the byte stream, one after another."""

    def __init__(self, log) -> None:
        self.log = log
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                if len(self.buffer) > MAX_HEAD:
                    self._refuse()
                return
            t = time.time()
            head = self.buffer[:head_end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._refuse()
                return
            if length > MAX_BODY:
                self._refuse()
                return
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            body, self.buffer = self.buffer[head_end + 4 : end], self.buffer[end:]
            self._handle(t, head[0], headers, body)

    def _handle(self, t: float, request_line: str, headers: dict, body: bytes) -> None:
        try:
            data = json.loads(body).get("data", {})
        except (ValueError, AttributeError):
            data = {}
        parts = request_line.split(" ")
        entry = {
            "event": "start",
            "t": t,
            "path": parts[1] if len(parts) > 1 else "",
            "webhook_id": headers.get("webhook-id", ""),
            "job_id": str(data.get("job_id", "")),
            "run_id": data.get("run_id"),
            "attempt": data.get("attempt"),
            "scheduled_at": data.get("scheduled_at"),
        }
        if self.log:
            self.log.write(json.dumps(entry) + "\n")
        assert self.transport is not None  # set by connection_made
        self.transport.write(OK)

    def _refuse(self) -> None:
        assert self.transport is not None  # set by connection_made
        self.transport.write(BAD)
        self.transport.close()
        self.transport = None

    def connection_lost(self, exc) -> None:
        self.transport = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", help="JSON-lines log of every request")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    args = parser.parse_args()

    async def serve() -> None:
        log = open(args.log, "a", buffering=1 << 16) if args.log else None  # noqa: SIM115
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        server = await loop.create_server(
            lambda: Request(log), "127.0.0.1", args.port, backlog=4096
        )
        port = server.sockets[0].getsockname()[1]
        if args.port_file:
            tmp = Path(args.port_file + ".tmp")
            tmp.write_text(str(port))
            tmp.rename(args.port_file)
        while not stop.is_set():
            # Readers (the bench) tail the log while we run.
            if log:
                log.flush()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
        server.close()
        if log:
            log.close()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
