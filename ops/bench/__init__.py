"""``manage.py bench``: the scenarios of docs/benchmarks.md, measured on PostgreSQL.

Each scenario prints one JSON object (parameters, machine, figures), so runs
can be compared. Figures from repeated runs are medians. The bench works in
the configured database, which must be a scratch database: it refuses one that
holds jobs it did not make, unless ``--force``.

One module per scenario, each with its own docstring:

- ``dispatch``: fires/s of one dispatcher and of two, on a due set;
- ``scale``: the same with 1,000,000 jobs, 100,000 due;
- ``e2e``: interval jobs delivered to a loopback receiver by a dispatcher and
  workers, with gunicorn beside them; ``overload``: ``e2e`` at N jobs, then 2N;
- ``slow``: deliveries held by a receiver that answers late;
- ``recovery``: cron jobs a day behind, drained tick by tick;
- ``audit``: the fire auditor over a million runs;
- ``create``: jobs created through the public API under gunicorn;
- ``idle``: what an idle fleet of workers costs the database, and how fast it
  wakes up;
- ``history``: the hot path and the runs admin, without and with 30 days of
  history;
- ``login``: health latency while wrong passwords are posted to the admin's
  sign-in form.

What they share: ``scratch`` (the bench's owner, clearing the database, jobs
inserted by SQL), ``processes`` (starting and stopping the receiver, gunicorn
and ``manage.py`` commands; their CPU and memory), ``machine`` (where a figure
holds) and ``figures`` (medians and percentiles).
"""

from __future__ import annotations


class BenchRefused(Exception):
    """The database is not a scratch database (or not PostgreSQL)."""


class BenchFailed(Exception):
    """A scenario's own invariant did not hold (raised, never asserted, so
    ``python -O`` cannot skip the check)."""
