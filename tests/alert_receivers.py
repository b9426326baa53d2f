"""Real channels on this machine for the alert tests: an HTTP server that
apprise's ``json://`` posts to, and an SMTP server (aiosmtpd) that its
``mailto://`` sends to. Both record what they receive."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller


class JsonReceiver:
    """Answers every POST with ``status``, except the first ``hang`` ones
    (all of them with -1), which it holds without answering; keeps each
    request's JSON body; ``connections`` counts accepted sockets."""

    def __init__(
        self, host: str = "127.0.0.1", *, status: int = 200, hang: int = 0, redirect: str = ""
    ):
        self.bodies: list[dict] = []
        self.requests: list[str] = []  # "METHOD path" of every request
        self.connections = 0
        self.status = status
        self.hang = hang
        self.redirect = redirect
        self._release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                receiver.requests.append(f"GET {self.path}")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                receiver.requests.append(f"POST {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                receiver.bodies.append(json.loads(body or b"{}"))
                if receiver.hang < 0 or len(receiver.bodies) <= receiver.hang:
                    receiver._release.wait(120)
                    return
                self.send_response(receiver.status)
                if receiver.redirect:
                    self.send_header("Location", receiver.redirect)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self):
                sock, address = super().get_request()
                receiver.connections += 1
                return sock, address

        self.server = Server((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.host = host
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "alerts") -> str:
        return f"json://{self.host}:{self.port}/{path}"

    def __enter__(self) -> JsonReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()


class _Mailbox:
    def __init__(self) -> None:
        self.messages: list[dict] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(
            {
                "from": envelope.mail_from,
                "to": list(envelope.rcpt_tos),
                "data": envelope.content.decode("utf-8", errors="replace"),
            }
        )
        return "250 Message accepted for delivery"


@contextlib.contextmanager
def smtp_server() -> Iterator[tuple[int, list[dict]]]:
    """An aiosmtpd server on 127.0.0.1 (no TLS, no auth): (port, messages)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mailbox = _Mailbox()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, mailbox.messages
    finally:
        controller.stop()


def mailto_url(port: int) -> str:
    return f"mailto://127.0.0.1:{port}?from=punctual@example.com&to=ops@example.com&mode=insecure"
