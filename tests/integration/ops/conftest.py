"""Fixtures for the operations endpoints: a parsed /metrics scrape, and a way to
make the database really unreachable for one request."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import pytest
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from dispatch.worker import Worker
from tests.polling import wait_until  # noqa: F401  (re-exported)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_metrics(text: str) -> tuple[dict[str, str], Samples]:
    """(family name -> type, (sample name, sorted labels) -> value)."""
    types, samples = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return types, samples


@pytest.fixture
def scrape(client) -> Callable[[], tuple[dict[str, str], Samples]]:
    def get() -> tuple[dict[str, str], Samples]:
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain; version=")
        return parse_metrics(response.content.decode())

    return get


@pytest.fixture
def database_down() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """Point the connection at a database that does not exist, for real.

    Needs ``transactional_db``: the connection is closed and reopened.
    """

    @contextlib.contextmanager
    def down() -> Iterator[None]:
        saved = connection.settings_dict["NAME"]
        connection.close()
        connection.settings_dict["NAME"] = "punctual_no_such_database"
        try:
            yield
        finally:
            connection.close()
            connection.settings_dict["NAME"] = saved

    return down


@pytest.fixture
def worker_thread() -> Iterator[Callable[[], Worker]]:
    """Start the real delivery engine (``Worker.run_forever``) in a thread.

    It uses its own database thread and connection, exactly as ``manage.py
    work`` does, so the test must commit (``transactional_db``). At teardown
    it is stopped the way SIGTERM stops it, and it closes its connection.
    """
    started: list[tuple[Worker, threading.Thread]] = []

    def start() -> Worker:
        worker = Worker(allow_private=True, concurrency=10, lease_seconds=10)
        thread = threading.Thread(target=worker.run_forever, daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the worker did not stop"
