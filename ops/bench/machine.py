"""Where a figure holds: the machine and the server the bench ran on."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from django.db import connection, transaction


def cpu_model() -> str:
    """The CPU's model name, as the kernel reports it (/proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    """Where a figure holds: the machine (its CPU model and cores) and the
    server (its version, whether it can JIT-compile, and the jit setting of
    Punctual's sessions: docs/operating/database.md "Supported servers")."""
    with connection.cursor() as cur:
        cur.execute("SELECT current_setting('server_version'), current_setting('jit')")
        pg, jit = cur.fetchone()
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "postgresql": pg,
        "jit_available": jit_available(),
        "jit": jit,
        "platform": platform.platform(),
    }


def jit_available() -> bool:
    """Whether the server can JIT-compile. ``pg_jit_available()`` answers
    false while ``jit`` is off, as Punctual's sessions have it: asked with
    it on, for one transaction."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL jit = on")
        cur.execute("SELECT pg_jit_available()")
        return bool(cur.fetchone()[0])


def describe_machine(figures: dict) -> str:
    """``machine()`` as one line for a person."""
    jit = "JIT available" if figures["jit_available"] else "no JIT"
    if figures["jit_available"]:
        jit += f", jit = {figures['jit']}"
    return (
        f"PostgreSQL {figures['postgresql']} ({jit}); CPU {figures['cpu_model']},"
        f" {figures['cores']} cores; Python {figures['python']}"
    )
