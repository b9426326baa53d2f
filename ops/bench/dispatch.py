"""The ``dispatch`` scenario: N interval jobs of which M are due; fires/s for
one dispatcher (in this process) and for two (two processes sharing the due
set). ``drain`` is one dispatcher's part, also run as ``manage.py bench
drain``."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from dispatch.dispatcher import Dispatcher
from ops.bench import processes
from ops.bench.figures import median_of
from ops.bench.scratch import insert_jobs, reset


def drain(batch_size: int, shard: tuple[int, int] | None = None) -> dict:
    """Tick until nothing is due; the figures of one dispatcher."""
    d = Dispatcher(batch_size=batch_size, shard=shard)
    runs = 0
    t0 = time.time()
    while True:
        result = d.tick()
        runs += result.runs
        if result.jobs == 0:
            break
    return {"t0": t0, "t1": time.time(), "runs": runs}


def scenario_dispatch(*, jobs: int, due: int, batch: int, repeat: int, force: bool) -> dict:
    one, two = [], []
    for _ in range(repeat):
        reset(force)
        insert_jobs(jobs, interval=60, due=due)
        r = drain(batch)
        one.append(r["runs"] / (r["t1"] - r["t0"]))
        assert r["runs"] == due, f"expected {due} fires, made {r['runs']}"

        reset(force)
        insert_jobs(jobs, interval=60, due=due)
        procs = [
            subprocess.Popen(
                [sys.executable, "manage.py", "bench", "drain", "--batch-size", str(batch)],
                cwd=processes.ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
        made = sum(o["runs"] for o in outs)
        assert made == due, f"two dispatchers made {made} fires for {due} due"
        span = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
        two.append(made / span)
    return {
        "fires_per_s_one_dispatcher": median_of(one),
        "fires_per_s_two_dispatchers": median_of(two),
        "runs": {"one": [round(x) for x in one], "two": [round(x) for x in two]},
    }
