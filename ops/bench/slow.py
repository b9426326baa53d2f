"""The ``slow`` scenario: K deliveries to a receiver that answers after S
seconds, held by W workers; the most in flight at once, each worker's peak
RSS, completion rate."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from dispatch.dispatcher import Dispatcher
from ops.bench import processes
from ops.bench.scratch import BENCH_OWNER, insert_jobs, reset


def scenario_slow(*, inflight: int, delay: float, workers: int, force: bool) -> dict:
    from runs.models import Run

    reset(force)
    with tempfile.TemporaryDirectory(prefix="punctual-bench-") as tmp_name:
        tmp = Path(tmp_name)
        receiver, port, _log = processes.start_receiver(tmp)
        insert_jobs(
            inflight,
            interval=3600,
            due=inflight,
            url=f"http://127.0.0.1:{port}/slow/{delay}",
            overlap="allow",
            timeout=max(30, int(delay * 10)),
        )
        Dispatcher(batch_size=5000).run_once()
        per_worker = -(-inflight // workers)
        procs = [
            processes.start(
                ["manage.py", "work", "--concurrency", str(per_worker), "--lease-seconds", "60"],
                tmp / f"work{k}.out",
            )
            for k in range(workers)
        ]
        import requests

        peak, rss = 0, [0.0] * workers
        t_begin = time.monotonic()
        done = Run.objects.filter(job__owner__username=BENCH_OWNER, state="succeeded")
        while time.monotonic() - t_begin < 600:
            stats = requests.get(f"http://127.0.0.1:{port}/stats", timeout=10).json()
            peak = max(peak, stats["max_in_flight"])
            rss = [max(r, processes.rss_mb(p.pid)) for r, p in zip(rss, procs, strict=True)]
            if stats["count"] >= inflight and stats["in_flight"] == 0:
                break
            time.sleep(0.2)
        while done.count() < inflight and time.monotonic() - t_begin < 600:
            time.sleep(0.2)
        elapsed = time.monotonic() - t_begin
        succeeded = done.count()
        for p in procs:
            processes.stop(p)
        processes.stop(receiver)
    return {
        "max_in_flight": peak,
        "worker_rss_mb": [round(r) for r in rss],
        "succeeded": succeeded,
        "completion_per_s": round(succeeded / elapsed, 1),
        "elapsed_s": round(elapsed, 1),
    }
