"""Leases: claim, heartbeat and release runs as guarded, set-based updates
(docs/design/guarantees.md "Fencing"; every state change a guarded, batched update).

Every statement here works on a batch and commits once. A lease is the triple
``(state = 'running', lease_owner, attempt)``: every write to a held run is
guarded on all three, so when the lease was lost (it expired and another
worker took the run over, counting a new attempt) the write matches nothing.
That is the fencing that keeps a zombie worker from touching a newer attempt.
No row lock is ever held across network I/O: the claim commits before the
delivery starts. Writing an attempt's outcome is ``runs/outcomes.py``.

The SQL of this concern is named once, below; each statement says which loop
runs it and which race its guard prevents. Rows are read by column name: the
``RETURNING`` list of a claim is spelled with the field names of ``Claimed``.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.db import DB_NOW_SQL, db_now, dict_cursor, hot_transaction
from core.sql import Placeholder
from runs import fair_shares, notify, partitions

# An attempt's deadline is its start + timeout_seconds + this grace. A
# heartbeat never extends a lease past it, so a wedged worker that keeps
# heartbeating still loses the run.
DEADLINE_GRACE_SECONDS = 5


@dataclass
class Claimed:
    run_id: uuid.UUID
    job_id: uuid.UUID
    scheduled_at: dt.datetime
    kind: str
    attempt: int
    max_attempts: int
    lease_until: dt.datetime
    deadline_at: dt.datetime
    job_name: str
    url: str
    payload: dict
    secret_encrypted: str
    previous_secret_encrypted: str
    previous_secret_until: dt.datetime | None
    timeout_seconds: int
    retry_backoff_seconds: int
    attempt_started_at: dt.datetime | None = None
    owner_id: int | None = None  # the job's owner (the fair claim counts shares by it)
    # How the webhook is called (jobs/http_options.py); the secrets encrypted.
    method: str = "POST"
    body_mode: str = "envelope"
    auth_kind: str = "none"
    auth_encrypted: str = ""
    headers_encrypted: str = ""


# ---------------------------------------------------------------------------
# SQL
# ---------------------------------------------------------------------------

# The columns of Claimed, in its field names.
_RETURNING_CLAIMED = """
    RETURNING r.id AS run_id, r.job_id, r.scheduled_at, r.kind, r.attempt,
              r.max_attempts, r.lease_until, r.deadline_at, j.name AS job_name,
              j.url, j.payload, j.secret_encrypted, j.previous_secret_encrypted,
              j.previous_secret_until, j.timeout_seconds, j.retry_backoff_seconds,
              r.attempt_started_at, r.owner_id, j.method, j.body_mode, j.auth_kind,
              j.auth_encrypted, j.headers_encrypted
"""

# Every unfinished run is scheduled at or after the active floor
# (runs/partitions.py), which the claim reads first, FOR SHARE. Every
# reference to runs_run in a claim that looks for unfinished runs carries this
# bound, so the planner keeps only the days from the floor on: planning over
# every day retention keeps (30 by default) cost more than running the claim.
# The auditor (ops/audit.py) trusts no floor and uses ITS_TURN unbounded.
FROM_FLOOR = "AND {alias}.scheduled_at >= %(floor)s"

# Take the runs chosen by the CTE ``c``. Counting the attempt at claim time
# means a worker that dies mid-delivery has still used an attempt: a receiver
# that kills workers cannot loop forever, and the new attempt number is what
# fences the previous holder out.
_TAKE = """
    UPDATE runs_run AS r SET
        state = 'running',
        attempt = r.attempt + 1,
        lease_owner = %(owner)s,
        lease_seconds = %(lease)s,
        attempt_started_at = %(now)s,
        deadline_at = %(now)s + make_interval(secs => j.timeout_seconds + %(grace)s),
        lease_until = least(
            %(now)s + make_interval(secs => %(lease)s),
            %(now)s + make_interval(secs => j.timeout_seconds + %(grace)s)),
        started_at = coalesce(r.started_at, %(now)s),
        lag_seconds = coalesce(r.lag_seconds, extract(epoch FROM %(now)s - r.scheduled_at))
    FROM c, jobs_job AS j
    WHERE r.id = c.id AND r.scheduled_at = c.scheduled_at AND j.id = r.job_id
      AND r.scheduled_at >= %(floor)s
"""


def record_lost_attempts(outcome: str, error: str, floor: str = "") -> str:
    """A CTE step over the locked runs ``c``: the attempt of each run in ``c``
    that was still ``running`` (its lease lost), recorded with ``outcome``.
    Waiting runs in ``c`` have no attempt in flight and get no row. ON
    CONFLICT: the attempt row may already exist when its worker wrote it just
    before losing the lease. ``floor``: FROM_FLOOR.format(alias="r") in a
    claim."""
    return f"""
    ), lost AS (
        INSERT INTO runs_attempt
            (run_id, scheduled_at, number, worker, started_at, finished_at, outcome, error)
        SELECT r.id, r.scheduled_at, r.attempt, r.lease_owner, r.attempt_started_at, %(now)s,
               '{outcome}', '{error}'
        FROM runs_run AS r JOIN c ON c.id = r.id AND c.scheduled_at = r.scheduled_at
        WHERE r.state = 'running' {floor}
        ON CONFLICT DO NOTHING
    )
"""


# The attempt that lost its lease, recorded as ``lease_expired``: shared by the
# expired-lease claim below and the dispatcher's fail_exhausted
# (runs/outcomes.py).
_LEASE_EXPIRED = ("lease_expired", "lease expired: the worker stopped heartbeating")
RECORD_LOST_ATTEMPTS = record_lost_attempts(*_LEASE_EXPIRED)

# Only runs of live jobs are ever claimed, and the claim locks each job row
# FOR KEY SHARE ... SKIP LOCKED next to its run row. Why no claim can start an
# attempt after a pause or delete of the job has committed (READ COMMITTED):
# every pause (the verbs in runs/job_verbs.py take the row FOR UPDATE, and so
# does the automatic pause, through them), every edit and the delete hold a
# lock on the job row that conflicts with FOR KEY SHARE from before they
# change it until they commit. So when the claim reaches the job row, either
# - the pause holds its lock: SKIP LOCKED drops the run from this claim; or
# - the pause committed: locking the row reads its newest version and
#   PostgreSQL re-checks ``state = 'active' AND deleted_at IS NULL`` on it
#   (even when the claim's snapshot is older), so the run is dropped; or
# - the pause has not taken its lock yet: the claim's share lock makes it
#   wait until the claim commits, so the attempt started before the pause.
# An unlocked join would see the job as of the statement's snapshot: a claim
# that started just before the pause committed would take the run and commit
# after it. The same lock makes the overlap test below read the job's current
# overlap_policy (an edit also holds the row FOR UPDATE). KEY SHARE, the
# weakest lock that conflicts with FOR UPDATE, does not conflict with the
# dispatcher's FOR NO KEY UPDATE (dispatch/queries.py): a claim and a tick
# never make each other skip a job. A claim skips, for one round, the runs of
# a job whose row an owner's verb holds, or whose failure streak a completion
# is updating.
JOB_IS_LIVE = "AND j.state = 'active' AND j.deleted_at IS NULL"
# Which runs may start an attempt (docs/concepts/pause-and-resume.md "Run it
# now, while paused"): every run of an active job; of a paused job, only a
# manual run or a test delivery made during the pause, the owner's explicit
# "run it now" (its scheduled_at is when it was made, read under the job's
# row lock (runs/job_verbs.py), so one made after the pause committed is
# never older than paused_at). Scheduled, catch-up and backfill runs of a
# paused job wait for the resume; no run of a deleted job starts. The runs
# the pause found waiting it cancelled; one in flight finishes its attempt,
# and its retry is cancelled (runs/outcomes.py COMPLETE), whatever its kind.
# Never NULL (paused_at IS NOT NULL comes first), so that NOT of it
# (outcomes.py CANCEL_STOPPED) is exact. The claims lock the job row FOR KEY
# SHARE, so it is checked against the job's newest version (JOB_IS_LIVE).
MADE_IN_PAUSE = """({run}.kind IN ('manual', 'test') AND {job}.paused_at IS NOT NULL
            AND {run}.scheduled_at >= {job}.paused_at)"""
RUN_MAY_START = (
    """{job}.deleted_at IS NULL AND ({job}.state = 'active'
        OR """
    + MADE_IN_PAUSE
    + ")"
)
MAY_START = "AND " + RUN_MAY_START.format(run="r", job="j")
# A waiting run ``r`` of job ``j`` whose turn it is under the overlap policy in
# force now: under ``allow`` a run made under ``allow`` never waits; otherwise
# it waits while another run of the job is running, or waiting since earlier
# (runs made exclusive still wait for each other after a change to
# ``allow``). Of a paused job, only the waiting runs that may start count:
# a backfill waiting for the resume holds back no manual run made during the
# pause. The claim below takes only such runs; the auditor's "stuck
# waiting" rule (ops/audit.py) flags only such runs.
#
# Two NOT EXISTS rather than one with an OR: runs_run is partitioned by day
# (runs/partitions.py), and each probe visits every day's partition. Split,
# each is a plain index probe per partition (not two bitmap scans and an OR),
# and the "waiting since earlier" one skips the days after the run's own.
_ITS_TURN = (
    """
    ((j.overlap_policy = 'allow' AND NOT r.exclusive) OR (NOT EXISTS (
        SELECT 1 FROM runs_run AS e
        WHERE e.job_id = r.job_id AND e.id <> r.id AND e.state = 'running'
          AND (j.overlap_policy <> 'allow' OR e.exclusive) {floor})
    AND NOT EXISTS (
        SELECT 1 FROM runs_run AS e
        WHERE e.job_id = r.job_id AND e.id <> r.id
          AND (j.overlap_policy <> 'allow' OR e.exclusive)
          AND e.state IN ('pending', 'retrying') AND e.scheduled_at <= r.scheduled_at
          AND (e.scheduled_at, e.id) < (r.scheduled_at, r.id) {floor}
          AND (j.state = 'active' OR """
    + MADE_IN_PAUSE.format(run="e", job="j")
    + """))))
"""
)
ITS_TURN = _ITS_TURN.format(floor="")
ITS_TURN_FROM_FLOOR = _ITS_TURN.format(floor=FROM_FLOOR.format(alias="e"))

# The claims' locks: the run FOR UPDATE and its job FOR KEY SHARE (why:
# JOB_IS_LIVE), both SKIP LOCKED, so that concurrent claimers take disjoint
# batches and none waits for another.
LOCK_RUN_AND_JOB = "FOR UPDATE OF r SKIP LOCKED FOR KEY SHARE OF j SKIP LOCKED"

# Worker claim loop and the pull API's claim, first statement: running runs
# whose lease expired (their worker died or stalled) are taken over at once
# with attempt + 1, and the lost attempt is recorded. ``lease_until < now``
# re-checked under the row lock keeps a run whose holder just heartbeated
# from being taken; ``attempt < max_attempts`` leaves runs with no attempt
# left to fail_exhausted (runs/outcomes.py). A run of a paused or deleted job
# is not taken over: the dispatcher's cancel_stopped (runs/outcomes.py) ends it.
# Oldest fire first, walking run_takeover_idx: lease_until, the order one might
# expect, is in no index (heartbeats rewrite it and must stay HOT updates),
# and ordering by it was a Sort, the plan ORDERED_WALK disables.
CLAIM_EXPIRED = (
    """
    WITH c AS (
        SELECT r.id, r.scheduled_at FROM runs_run AS r JOIN jobs_job AS j ON j.id = r.job_id
        WHERE r.state = 'running' AND r.target_kind = %(target)s
          AND r.lease_until < %(now)s AND r.attempt < r.max_attempts {scope}
          AND r.scheduled_at >= %(floor)s
          """
    + MAY_START
    + """
        ORDER BY r.scheduled_at
        LIMIT %(limit)s
        """
    + LOCK_RUN_AND_JOB
    + record_lost_attempts(*_LEASE_EXPIRED, floor=FROM_FLOOR.format(alias="r"))
    + _TAKE
    + _RETURNING_CLAIMED
)

# Worker claim loop and the pull API's claim, second statement: due waiting
# runs of live jobs, oldest first (uses run_claim_webhook_idx; a pull
# worker's, run_claim_pull_owner_idx, or run_claim_pull_idx for one job). The
# worker runs it when one owner alone has due runs, and to fill a batch that
# the owners' shares (FAIR_CLAIM) left short; the pull API always (a pull
# worker claims its own owner's runs only). Under the job's current overlap
# policy skip/queue a run waits while another run of its job is running, or
# while an earlier one is still waiting, whatever policy the runs were created
# under: that is what makes a queued fire start only when the one ahead ends,
# and it keeps two runs of one job out of the same batch. A run created under
# skip/queue (``exclusive``) also keeps waiting for the other exclusive ones
# after a change to ``allow``: the partial unique index
# run_one_running_per_exclusive_job, the backstop, counts those flags. The CTE
# fence stops the planner from updating more than LIMIT rows, and SKIP LOCKED
# lets concurrent claimers take disjoint batches instead of the same run
# twice.
CLAIM_WAITING = (
    """
    WITH c AS (
        SELECT r.id, r.scheduled_at FROM runs_run AS r JOIN jobs_job AS j ON j.id = r.job_id
        WHERE r.state IN ('pending', 'retrying') AND r.target_kind = %(target)s
          AND r.available_at <= %(now)s {scope}
          AND r.scheduled_at >= %(floor)s
          """
    + MAY_START
    + """
          AND """
    + ITS_TURN_FROM_FLOOR
    + """
        ORDER BY r.available_at
        LIMIT %(limit)s
        """
    + LOCK_RUN_AND_JOB
    + """
    )
"""
    + _TAKE
    + _RETURNING_CLAIMED
)

# Worker claim loop and the pull API's claim, first in the claim's
# transaction: the waiting runs are walked in claim order and the walk stops
# once LIMIT runs passed ITS_TURN and the locks. The planner prices ITS_TURN's
# probes at almost nothing, so left to itself it joined every due run to its
# job, checked each one's turn (two probes per partition) and sorted them all,
# to keep LIMIT of them: one claim of 200 beside 20,000 due runs and 30 days
# of partitions read 2.6 million pages in 760 ms; walking the claim indexes in
# order (a merge of each partition's index, already sorted), 27,000 pages in
# 16 ms. A claim then costs its batch, not the backlog: a backlog no longer
# slows the claims that would drain it. SET LOCAL ends with the transaction.
#
# Every claim statement has an index that yields its order, so a plan
# without a Sort always exists. That matters: before PostgreSQL 18 a
# disabled node is not forbidden, it costs 1e10, and a statement whose only
# plan needs one is priced past jit_above_cost (then JIT-compiled on every
# run, seconds of CPU, unless NO_JIT) and planned as if nothing else
# mattered. tests/integration/test_hot_plans.py explains every statement of
# a claim as sent and fails on a node priced that high, or one marked
# disabled (PostgreSQL 18).
ORDERED_WALK = "SET LOCAL enable_sort = off"

# Worker claim loop, before the waiting runs are claimed: the owners that
# have due waiting webhook runs (uses run_claim_owner_idx). A loose index
# scan: each step is one probe per partition for the first entry after the
# previous owner, which is the next owner and its oldest available_at, so it
# costs one step per owner with waiting runs however many runs each has. An
# owner whose oldest waiting run is not due yet (a spread backfill) has none
# due, and is left out.
WAITING_OWNERS = """
    WITH RECURSIVE o AS (
        (SELECT owner_id, available_at FROM runs_run
         WHERE state IN ('pending', 'retrying') AND target_kind = 'webhook'
           AND scheduled_at >= %(floor)s
         ORDER BY owner_id, available_at LIMIT 1)
        UNION ALL
        SELECT n.owner_id, n.available_at FROM o CROSS JOIN LATERAL (
            SELECT owner_id, available_at FROM runs_run
            WHERE state IN ('pending', 'retrying') AND target_kind = 'webhook'
              AND scheduled_at >= %(floor)s AND owner_id > o.owner_id
            ORDER BY owner_id, available_at LIMIT 1) AS n
    )
    SELECT owner_id FROM o WHERE available_at <= %(now)s
"""

# Worker claim loop, when several owners have due runs: each owner's share of
# the batch, its oldest due runs first (uses run_claim_owner_idx, one probe
# per partition per owner). Within an owner, the rules of CLAIM_WAITING hold
# unchanged: live jobs only (JOB_IS_LIVE), the overlap rule (ITS_TURN), the
# run and job locks (LOCK_RUN_AND_JOB), each applied in the owner's LATERAL
# before its LIMIT, so a locked or waiting run does not use up the share.
# All runs of a job have the job's owner, so two runs of one job still meet in
# one LATERAL, where ITS_TURN keeps them apart as before.
#
# The owner is matched by a range of one value and the runs ordered by
# (owner_id, available_at), rather than ``owner_id = o.owner_id ORDER BY
# available_at``: with an equality, the planner may pick run_claim_webhook_idx
# and filter by owner, which for a small owner beside a flood walks the
# flood's entries (measured: 2,427 buffers for 14 runs). Only
# run_claim_owner_idx gives this order, so each owner's LATERAL is a probe of
# it per partition.
FAIR_CLAIM = (
    """
    WITH c AS (
        SELECT p.id, p.scheduled_at
        FROM unnest(%(owners)s::bigint[], %(shares)s::int[]) AS o(owner_id, share)
        CROSS JOIN LATERAL (
            SELECT r.id, r.scheduled_at FROM runs_run AS r JOIN jobs_job AS j ON j.id = r.job_id
            WHERE r.owner_id >= o.owner_id AND r.owner_id <= o.owner_id
              AND r.state IN ('pending', 'retrying')
              AND r.target_kind = 'webhook' AND r.available_at <= %(now)s
              AND r.scheduled_at >= %(floor)s
              """
    + MAY_START
    + """
              AND """
    + ITS_TURN_FROM_FLOOR
    + """
            ORDER BY r.owner_id, r.available_at
            LIMIT o.share
            """
    + LOCK_RUN_AND_JOB
    + """
        ) AS p
    )
"""
    + _TAKE
    + _RETURNING_CLAIMED
)

# Worker claim loop, every OWNERS_EVERY seconds: whether more than one owner
# has live webhook jobs. Only then does a worker cap what one owner holds in
# flight (docs/design/claims.md); an install with one owner uses every slot.
SEVERAL_OWNERS = (
    """
    SELECT count(*) > 1 AS several FROM (
        SELECT DISTINCT owner_id FROM jobs_job AS j
        WHERE j.target_kind = 'webhook' """
    + JOB_IS_LIVE
    + """
        LIMIT 2) AS o
"""
)


def several_owners() -> bool:
    """SEVERAL_OWNERS."""
    with dict_cursor() as cur:
        cur.execute(SEVERAL_OWNERS)
        return bool(cur.fetchone()["several"])


# A pull worker claims only its owner's jobs (optionally one of them). The
# run's copy of the owner is what run_claim_pull_owner_idx walks; the job's
# is the one the claim is held to (they are always equal).
PULL_SCOPE = "AND r.owner_id = %(owner_id)s AND j.owner_id = %(owner_id)s {job}"

# Whose runs CLAIM_EXPIRED and CLAIM_WAITING take: a worker's, any owner's;
# a pull worker's, its owner's (PULL_SCOPE), or one job of its owner's.
CLAIM_SCOPE = Placeholder(
    "scope",
    {
        "any owner": "",
        "pull owner": PULL_SCOPE.format(job=""),
        "pull owner, one job": PULL_SCOPE.format(job="AND r.job_id = %(job_id)s"),
    },
)

# The one lease rule, shared by HEARTBEAT and COMPLETE (runs/outcomes.py): a
# run belongs to its current (lease_owner, attempt) until another claim takes
# it over or its attempt deadline passes. An expired lease makes the run
# claimable; it does not by itself take the run away, so a holder whose lease
# lapsed (a slow heartbeat, a database blip) may still extend or complete it
# while nobody has claimed it. ``{attempt}`` names the column holding the
# caller's attempt number. The race this fences: a takeover counts a new
# attempt and sets a new owner under the row lock, and the UPDATE that uses
# this predicate waits for that lock and re-checks the predicate against the
# committed row, so the previous holder's write matches nothing.
#
# Both statements find their runs by key, and the state comparison is
# written COLLATE "C" (the same equality for these plain words) so that the
# planner cannot prove it implies run_active_idx's predicate (pending,
# running or retrying), and never reads the runs through that index. With
# the window's scheduled_at bounds as its only usable condition there, that
# index is read whole: every active run of the day, the backlog, not the
# batch. The planner chose it when its statistics had not seen the window's
# runs yet (the recent edge of today's partition on a busy install, or a new
# day's): it expected one run there. A completion beside 80,000 waiting runs
# in a bench then cost 230 us per run completed, the largest share of
# PostgreSQL's time, and the more jobs waited the more it cost
# (tests/integration/test_hot_plans.py, "a completion and a heartbeat read a
# bounded number of buffers per run"). The window then reads the
# scheduled_at index: the runs of the batch's span, whatever waits.
LEASE_HELD = """
    r.state = 'running' COLLATE "C" AND r.lease_owner = %(owner)s AND r.attempt = {attempt}
    AND r.deadline_at >= %(now)s
"""

# Partition pruning for the statements that find runs by id (HEARTBEAT, and
# COMPLETE in runs/outcomes.py): runs_run is partitioned by day on
# scheduled_at (runs/partitions.py), and a lookup by id alone probes every
# day's partition. ``scheduled_at BETWEEN %(lo)s AND %(hi)s``, the earliest
# and latest scheduled_at of the batch (the claim returned them), lets the
# planner keep only the days the batch spans. Unknown (a caller that did not
# say), the window is unbounded and every partition is probed, as before.
UNBOUNDED = {
    "lo": dt.datetime.min.replace(tzinfo=dt.UTC),
    "hi": dt.datetime.max.replace(tzinfo=dt.UTC),
}


def window(scheduled: Iterable[dt.datetime | None]) -> dict[str, dt.datetime]:
    """The ``lo``/``hi`` parameters for a batch's scheduled_at values."""
    known = [at for at in scheduled]
    if not known or any(at is None for at in known):
        return UNBOUNDED
    days = [at for at in known if at is not None]
    return {"lo": min(days), "hi": max(days)}


# Worker heartbeat loop and the pull API's heartbeat: one statement for every
# lease the process holds, fenced by LEASE_HELD. Never past the deadline, so a
# wedged worker that keeps heartbeating still loses the run.
HEARTBEAT = (
    """
    UPDATE runs_run AS r SET lease_until = least(
        %(now)s + make_interval(secs => coalesce(%(lease)s, r.lease_seconds)), r.deadline_at)
    FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS h(id, attempt)
    WHERE r.id = h.id AND r.scheduled_at BETWEEN %(lo)s AND %(hi)s AND"""
    + LEASE_HELD.format(attempt="h.attempt")
    + """
    RETURNING r.id, r.lease_until
"""
)

# Worker shutdown: give runs back, claimable at once, without counting the
# attempt (max_attempts + 1 offsets the attempt the next claim counts), and
# record the attempt as ``interrupted`` so the owner sees why it was cut
# short. Guarded on owner and attempt, so a run already taken over is left
# alone (and gets no attempt row from this worker).
RELEASE = """
    WITH released AS (
        UPDATE runs_run AS r SET state = 'retrying', available_at = %(now)s,
            max_attempts = r.max_attempts + 1, lease_owner = '', lease_until = NULL
        FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS h(id, attempt)
        WHERE r.id = h.id AND r.attempt = h.attempt
          AND r.state = 'running' AND r.lease_owner = %(owner)s
        RETURNING r.id, r.scheduled_at, r.attempt, r.attempt_started_at
    ), recorded AS (
        INSERT INTO runs_attempt
            (run_id, scheduled_at, number, worker, started_at, finished_at, outcome, error)
        SELECT id, scheduled_at, attempt, %(owner)s, attempt_started_at, %(now)s, 'interrupted',
               'interrupted: the worker stopped before the delivery finished'
        FROM released
        ON CONFLICT DO NOTHING
    )
    SELECT count(*) AS released FROM released
"""


# Worker claim loop, idle and listening (dispatch/wakeup.py): seconds until the
# earliest lease of a running webhook run with an attempt left may expire (uses
# run_active_idx). A worker that dies sends no NOTIFY, so the idle workers set
# a timer for that instant: its run is taken over when the lease expires, not
# at the next safety poll.
NEXT_LEASE_EXPIRY = f"""
    SELECT extract(epoch FROM min(lease_until) - {DB_NOW_SQL}) AS seconds
    FROM runs_run
    WHERE state = 'running' AND target_kind = 'webhook' AND attempt < max_attempts
"""


# ---------------------------------------------------------------------------
# claim, heartbeat, release
# ---------------------------------------------------------------------------


def _claimed(row: dict) -> Claimed:
    # Django reads jsonb as text and lets JSONField decode it; raw SQL decodes.
    if isinstance(row["payload"], str):
        row["payload"] = json.loads(row["payload"])
    return Claimed(**row)


def _claim_waiting_fairly(
    cur, params: dict[str, Any], limit: int, cap: int | None, held: Counter[int]
) -> list[Claimed]:
    """Due waiting webhook runs, shared between the owners that have some
    (runs/fair_shares.py decides the rounds; docs/design/claims.md). With ``cap``,
    no owner gets more than its room under the claimer's per-owner cap, given
    what it ``held`` before this statement."""
    cur.execute(WAITING_OWNERS, params)
    waiting = [row["owner_id"] for row in cur.fetchall()]
    owners = fair_shares.owners_with_room(waiting, cap=cap, held=held)
    if not owners:
        return []
    if fair_shares.one_owner_takes_all(waiting, limit, cap=cap, held=held):
        # One owner, with room for the whole batch: the oldest due runs.
        cur.execute(
            CLAIM_WAITING.format(scope=CLAIM_SCOPE["any owner"]), {**params, "limit": limit}
        )
        return [_claimed(row) for row in cur.fetchall()]
    claimed: list[Claimed] = []
    taken: list[Counter[int | None]] = []
    start = random.randrange(len(owners))
    while shared := fair_shares.next_round(
        owners, limit, start=start, cap=cap, held=held, taken=taken
    ):
        cur.execute(
            FAIR_CLAIM,
            {**params, "owners": [o for o, _ in shared], "shares": [n for _, n in shared]},
        )
        got = [_claimed(row) for row in cur.fetchall()]
        claimed += got
        taken.append(Counter(c.owner_id for c in got))
    return claimed


def claim(
    owner: str,
    *,
    limit: int,
    lease_seconds: int,
    target_kind: str = "webhook",
    job_owner_id: int | None = None,
    job_id: uuid.UUID | None = None,
    now: dt.datetime | None = None,
    owner_cap: int | None = None,
    held: Mapping[int, int] | None = None,
    expired: bool = True,
    fair: bool = True,
) -> list[Claimed]:
    """Take up to ``limit`` runs: expired leases first (unless ``expired`` is
    False: a worker looks for them once a second), then due waiting runs,
    shared between owners (webhook runs; a pull worker's claim is its own
    owner's anyway). ``fair`` False skips the owners' scan and takes the
    oldest due runs, whoever owns them: for a worker that found only one
    owner with live webhook jobs.

    ``job_owner_id`` (and optionally ``job_id``) scopes a pull worker's claim
    to its owner's own jobs.

    ``owner_cap`` is the most runs of one owner the caller may hold in flight
    at once, and ``held`` how many of each owner's it holds now: a waiting run
    of an owner at its cap is left for later, so that one owner's slow
    deliveries never fill every slot (docs/design/claims.md).
    """
    scope = CLAIM_SCOPE["any owner"]
    if job_owner_id is not None:
        scope = CLAIM_SCOPE["pull owner, one job" if job_id else "pull owner"]
    with hot_transaction(), dict_cursor() as cur:
        cur.execute(ORDERED_WALK)
        db_time, floor = partitions.now_and_floor()
        params: dict[str, Any] = {
            "owner": owner,
            "lease": lease_seconds,
            "grace": DEADLINE_GRACE_SECONDS,
            "now": now or db_time,
            "floor": floor,
            "target": target_kind,
            "limit": limit,
            "owner_id": job_owner_id,
            "job_id": job_id,
        }
        claimed: list[Claimed] = []
        if expired:
            cur.execute(CLAIM_EXPIRED.format(scope=scope), params)
            claimed = [_claimed(row) for row in cur.fetchall()]
        left = limit - len(claimed)
        if left > 0 and target_kind == "webhook" and not scope and fair:
            in_flight = Counter(held or {})
            in_flight.update(c.owner_id for c in claimed if c.owner_id is not None)
            claimed += _claim_waiting_fairly(cur, params, left, owner_cap, in_flight)
        elif left > 0:
            cur.execute(CLAIM_WAITING.format(scope=scope), {**params, "limit": left})
            claimed += [_claimed(row) for row in cur.fetchall()]
    return claimed


def seconds_to_next_lease_expiry() -> float | None:
    """NEXT_LEASE_EXPIRY: None when no webhook run is running."""
    with dict_cursor() as cur:
        cur.execute(NEXT_LEASE_EXPIRY)
        seconds = cur.fetchone()["seconds"]
    return None if seconds is None else float(seconds)


def heartbeat(
    owner: str,
    held: list[tuple[uuid.UUID, int]],
    *,
    lease_seconds: int | None = None,
    now: dt.datetime | None = None,
    scheduled: Iterable[dt.datetime] | None = None,
) -> dict[uuid.UUID, dt.datetime]:
    """Extend every lease in ``held`` ((run_id, attempt) pairs) in one statement.

    ``scheduled``: the held runs' scheduled_at, if known (see ``window``).
    Returns the new ``lease_until`` of each lease still held; a pair missing
    from the answer was lost.
    """
    if not held:
        return {}
    with hot_transaction(), dict_cursor() as cur:
        cur.execute(
            HEARTBEAT,
            {
                "now": now or db_now(),
                "lease": lease_seconds,
                "owner": owner,
                "ids": [h[0] for h in held],
                "attempts": [h[1] for h in held],
                **(window(scheduled) if scheduled is not None else UNBOUNDED),
            },
        )
        return {row["id"]: row["lease_until"] for row in cur.fetchall()}


def release(owner: str, held: list[tuple[uuid.UUID, int]], now: dt.datetime | None = None) -> int:
    """Give runs back at shutdown, claimable at once; the attempt is not counted
    and is recorded ``interrupted``. Returns the number of runs released."""
    if not held:
        return 0
    with hot_transaction(), dict_cursor() as cur:
        cur.execute(
            RELEASE,
            {
                "now": now or db_now(),
                "owner": owner,
                "ids": [h[0] for h in held],
                "attempts": [h[1] for h in held],
            },
        )
        released = cur.fetchone()["released"]
        if released:
            notify.runs_claimable("released")
        return released
