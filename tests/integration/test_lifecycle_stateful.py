"""Randomized, stateful job lifecycles on the real database
(tests/lifecycle_machine.py walks them and states the invariants).

500 seeded sequences, in shards that xdist spreads over its workers. Each
sequence creates 2 jobs (sometimes a third later) and takes 15 to 18 steps:
owner verbs, dispatcher ticks and housekeeping, worker claims, heartbeats,
completions and crashes, and jumps of the database clock of seconds to hours.
After every step:

- the fire auditor finds nothing (a run left ``running`` past its lease is
  only checked once the fleet came back, after the last step: a crashed
  worker with nobody to take over is the scenario, not a bug);
- no attempt of a run starts while its job is paused or deleted, but one of
  a manual run or a test delivery the owner made during the pause (before
  any delete), which starts at once: a backfill made during the pause waits
  for the resume;
- under the overlap policy now in force, at most one run of a skip or queue
  job is running, and a queue job has at most one scheduled run waiting.
  Runs that were already running (or waiting) when an ``allow`` job switched
  are left to finish; any attempt started after the switch counts;
- a job's version never goes back, and one version never names two contents;
- no step raises (the schedule-history guard is checked after every step).

``PUNCTUAL_STATEFUL_SEEDS=500-624`` runs those sequences instead of 0-499:
``make test-pg15`` runs 125 others on the second server, and ``make
test-pg16`` and ``make test-pg17`` 25 others each, so the four servers
together walk 675 different sequences (docs/development.md "Tests").
``PUNCTUAL_STATEFUL_SEED=1234`` runs that one sequence (and prints it);
``PUNCTUAL_STATEFUL_KEEP=0,3,7`` keeps only those of its steps (a shrunk
reproduction); ``PUNCTUAL_STATEFUL_SHRINK=1`` shrinks each failure found.
"""

from __future__ import annotations

import os

import pytest

from tests.lifecycle_machine import run_seed, shrink

pytestmark = pytest.mark.django_db

SHARDS = 20
SEEDS = os.environ.get("PUNCTUAL_STATEFUL_SEEDS", "0-499")  # 500 sequences in all
ONE_SEED = os.environ.get("PUNCTUAL_STATEFUL_SEED")
KEEP = os.environ.get("PUNCTUAL_STATEFUL_KEEP")
SHRINK = os.environ.get("PUNCTUAL_STATEFUL_SHRINK") == "1"


@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_lifecycles_keep_the_invariants(shard, owner):
    if ONE_SEED is not None:
        if shard:
            pytest.skip("PUNCTUAL_STATEFUL_SEED runs one sequence, in shard 0")
        seeds = [int(ONE_SEED)]
    else:
        first, last = (int(end) for end in SEEDS.split("-"))
        seeds = list(range(first, last + 1))[shard::SHARDS]
    keep = [int(k) for k in KEEP.split(",") if k] if KEEP else None
    failures = []
    for seed in seeds:
        failure = run_seed(seed, owner, keep)
        if failure is not None:
            failures.append(shrink(seed, owner, failure) if SHRINK else failure)
    if failures:
        pytest.fail("\n\n".join(f.render() for f in failures), pytrace=False)
