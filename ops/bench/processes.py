"""The processes a scenario starts (the receiver, gunicorn, ``manage.py``
commands), how it stops them, and what it reads of them: CPU seconds (the
whole PostgreSQL server's too, when it runs on this host) and memory."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

from ops.bench import BenchFailed

ROOT = Path(settings.BASE_DIR)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("PUNCTUAL_ALLOW_PRIVATE_TARGETS", "true")
    env["PUNCTUAL_ALLOW_PRIVATE_TARGETS"] = "true"
    env["PUNCTUAL_LOG_LEVEL"] = "WARNING"
    return env


def start(args: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """``python *args`` from the repository root, private targets allowed and
    warnings only logged, its output into ``log``; in a session of its own, so
    that ``stop`` can kill what it started too."""
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env={**_env(), **(env or {})},
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM, and after ``timeout`` seconds SIGKILL to its whole session."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


RECEIVERS = {
    # The aiohttp app the process tests use too, logging only what the bench audits.
    "aiohttp": ["-m", "ops.loopback_receiver", "--lean"],
    # A hand-written asyncio receiver that parses every JSON body.
    "plain": ["-m", "ops.plain_receiver"],
}


def start_receiver(tmp: Path, kind: str = "aiohttp") -> tuple[subprocess.Popen, int, Path]:
    """A receiver of ``kind`` (RECEIVERS) on a free port; returns it, its
    port and its log (one JSON line per delivery) once it listens."""
    port_file, log = tmp / "receiver.port", tmp / "receiver.jsonl"
    proc = start(
        [*RECEIVERS[kind], "--log", str(log), "--port-file", str(port_file)],
        tmp / "receiver.out",
    )
    return proc, _wait_for_port(port_file, proc, "the receiver"), log


def _wait_for_port(port_file: Path, proc: subprocess.Popen, what: str) -> int:
    deadline = time.monotonic() + 30
    while not port_file.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.05)
    return int(port_file.read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_web(
    tmp: Path,
    *,
    workers: int = 2,
    threads: int = 4,
    env: dict | None = None,
    port: int | None = None,
) -> tuple[subprocess.Popen, int]:
    """gunicorn as the Procfile runs it (2 processes; 4 threads, where the
    benchmarks' figures were measured, the Procfile's 8 leave room for
    waiting pull claims, api/claim_waits.py), on ``port``
    or a free one; returns once its health endpoint answers (200 or 503)."""
    import requests

    port = port or _free_port()
    log = tmp / "web.out"
    proc = start(
        [
            "-m",
            "gunicorn",
            "scheduler_site.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--graceful-timeout",
            "4",
        ],
        log,
        env,
    )
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise BenchFailed("gunicorn exited: " + log.read_text()[-2000:])
        try:
            requests.get(f"http://127.0.0.1:{port}/api/v1/health/", timeout=10)
            return proc, port
        except requests.RequestException:
            pass  # not listening yet
        if time.monotonic() > deadline:
            stop(proc)
            raise BenchFailed("gunicorn did not answer within 120 s")
        time.sleep(0.1)


def start_gunicorn(tmp: Path, workers: int, threads: int) -> tuple[subprocess.Popen, str]:
    """``start_web`` for the create and login scenarios: no private targets,
    and the per-owner rate limit lifted (it would cap one owner's creates at
    100 requests/s per process, and create measures the work behind it)."""
    env = {
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1",
        "PUNCTUAL_ALLOW_PRIVATE_TARGETS": "false",
        "PUNCTUAL_API_RATE": "10000000/min",
    }
    proc, port = start_web(tmp, workers=workers, threads=threads, env=env)
    return proc, f"http://127.0.0.1:{port}"


def probe_ms(url: str) -> float:
    """Milliseconds for one GET of ``url``, answered or not."""
    import requests

    t0 = time.monotonic()
    with contextlib.suppress(requests.RequestException):
        requests.get(url, timeout=10)
    return (time.monotonic() - t0) * 1000


# -- what they cost ---------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) of one live process; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of gunicorn: its master and its worker processes."""
    return cpu_seconds(pid) + _children_cpu_seconds(pid)


def _children_cpu_seconds(pid: int) -> float:
    """CPU of a process's live children (gunicorn's worker processes)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        total += sum(cpu_seconds(int(c)) for c in children)
    return total


def postgres_cpu_seconds() -> float | None:
    """CPU seconds of the whole PostgreSQL server so far: the postmaster, its
    live backends, and the backends that have exited (the kernel adds those
    to the postmaster's ``cutime``/``cstime``). None when the server is not
    on this host (its ``postmaster.pid`` is not readable here)."""
    with connection.cursor() as cur:
        cur.execute("SHOW data_directory")
        data_directory = cur.fetchone()[0]
    try:
        pid = int(Path(data_directory, "postmaster.pid").read_text().split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    reaped = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
    return cpu_seconds(pid) + reaped + _children_cpu_seconds(pid)


def rss_mb(pid: int) -> float:
    """Resident memory of one live process, in MiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
