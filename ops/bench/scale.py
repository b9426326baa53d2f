"""The ``scale`` scenario: ``dispatch`` with 1,000,000 jobs and 100,000 due;
the cost should follow the due work, not the table size."""

from __future__ import annotations

from ops.bench.dispatch import drain
from ops.bench.figures import median_of
from ops.bench.scratch import insert_jobs, reset


def scenario_scale(*, jobs: int, due: int, batch: int, repeat: int, force: bool) -> dict:
    rates = []
    for _ in range(repeat):
        reset(force)
        insert_jobs(jobs, interval=60, due=due)
        r = drain(batch)
        rates.append(r["runs"] / (r["t1"] - r["t0"]))
    return {"fires_per_s_one_dispatcher": median_of(rates), "runs": [round(x) for x in rates]}
