"""The garbage collector of a long-running process: ``manage.py work``,
``manage.py dispatch`` and each gunicorn process (``scheduler_site/wsgi.py``).

CPython collects its young generation every 700 allocations, and now and then
walks every object the process holds. A busy worker allocates thousands of
short-lived objects per delivery (requests, responses, rows, tasks), so at
3,000 deliveries a second it collected about a hundred times a second, and its
full collections walked Django's and every library's objects each time:
measured with ``time.thread_time`` around each collection (``gc.callbacks``),
5 of a worker's 18 CPU seconds per 30 s run went to the collector.

``settle()`` is called once, after start-up and before the loop:

- ``gc.freeze()`` moves everything alive then (modules, settings, the URL
  conf, the connection) to a generation no collection walks again;
- the young generation is collected every 20,000 allocations instead of 700,
  and the older ones proportionally less often.

Nothing is switched off: a reference cycle (an exception's traceback, a task
and its coroutine) is still freed, a few thousand allocations later. The extra
garbage waiting for the collector is at most a few megabytes.
"""

from __future__ import annotations

import gc

THRESHOLDS = (20_000, 20, 20)


def settle() -> dict[str, object]:
    """Freeze the start-up objects and raise the thresholds; returns the
    collector's settings as now in force, for the process's start-up log line."""
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return {"gc_thresholds": gc.get_threshold(), "gc_frozen": gc.get_freeze_count()}
