"""Waiting in tests: poll with a deadline, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_until(
    predicate: Callable[[], object],
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "",
):
    """Poll ``predicate`` until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message or predicate}")
        time.sleep(interval)
