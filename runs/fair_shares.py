"""How a worker's claim shares its batch among the owners with due runs
(docs/design/claims.md). Pure: no database, no clock. The claim (runs/leases.py)
sends each round as one FAIR_CLAIM statement and passes back what it took.

A claim of ``limit`` runs goes in rounds, at most FAIR_ROUNDS of them:

1. Each owner with due runs and room under the claimer's per-owner cap
   gets a share of what the batch still lacks, round-robin from ``start``:
   as equal as whole runs allow (``shares``), never more than its room.
2. The database takes up to each share; locked runs, and runs whose turn it
   is not (the overlap rule), do not use a share up.
3. An owner that got its whole share may have more due runs; one that got
   less has none left to take now. The next round shares what the batch
   still lacks among the owners that filled their shares and have room
   left, from the first of them.
4. The claim stops when the batch is full, when no owner may have more, or
   after FAIR_ROUNDS rounds.

A flood of one owner's runs then takes only its share of a batch, and
another owner's due run waits one claim, not behind the flood.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

# Rounds of FAIR_CLAIM in one claim: after the first, what the shares left
# over goes to the owners that filled theirs (and have room under the cap).
FAIR_ROUNDS = 3


def shares(owners: Sequence[int], limit: int, start: int) -> list[tuple[int, int]]:
    """Share ``limit`` runs among ``owners``, round-robin from the one at
    ``start``: as equal as whole runs allow, the first ones in turn one more.
    With more owners than runs, only the first ``limit`` owners get one; the
    caller picks ``start`` at random, so every owner's turn comes."""
    turn = [*owners[start:], *owners[:start]]
    turn = turn[:limit]
    base, extra = divmod(limit, len(turn))
    return [(owner, base + (1 if n < extra else 0)) for n, owner in enumerate(turn)]


def room(owner: int, cap: int | None, held: Mapping[int, int]) -> int | None:
    """How many more of ``owner``'s runs the claimer may take: ``cap`` less
    what it holds of that owner (``held``), never below 0. None: no cap."""
    if cap is None:
        return None
    return max(0, cap - held.get(owner, 0))


def owners_with_room(
    waiting: Sequence[int], *, cap: int | None, held: Mapping[int, int]
) -> list[int]:
    """The owners with due runs (``waiting``) that the claimer may take more
    of, in the same order: the owners a fair claim shares its batch among."""
    return [o for o in waiting if room(o, cap, held) != 0]


def one_owner_takes_all(
    waiting: Sequence[int], limit: int, *, cap: int | None, held: Mapping[int, int]
) -> bool:
    """One owner alone has due runs, and room for the whole batch: the claim
    takes the oldest due runs (CLAIM_WAITING), without shares."""
    if len(waiting) != 1:
        return False
    left = room(waiting[0], cap, held)
    return left is None or left >= limit


def next_round(
    owners: Sequence[int],
    limit: int,
    *,
    start: int,
    cap: int | None = None,
    held: Mapping[int, int] | None = None,
    taken: Sequence[Mapping[int | None, int]] = (),
) -> list[tuple[int, int]]:
    """The next round of a fair claim of ``limit`` runs: (owner, share) for
    each owner that gets a share, or [] when the claim is done.

    ``owners``: owners_with_room, in order; ``start``: the index in it of the
    first owner in turn. ``cap`` and ``held``: the claimer's per-owner cap
    and what it holds of each owner before these rounds (no cap: None).
    ``taken``: what each earlier round of this claim took, runs by owner, in
    order. The rounds so far are replayed from these, so the caller keeps no
    state but ``taken``.
    """
    held_now = Counter(held or {})
    left = limit
    candidates = list(owners)
    for number in range(FAIR_ROUNDS):
        if left <= 0 or not candidates:
            return []
        shared = shares(candidates, left, start % len(candidates) if number == 0 else 0)
        shared = [(o, _at_most(n, room(o, cap, held_now))) for o, n in shared]
        shared = [(o, n) for o, n in shared if n > 0]
        if not shared or number == len(taken):
            return shared
        got = taken[number]
        left -= sum(got.values())
        held_now.update({o: n for o, n in got.items() if o is not None})
        # Only an owner that filled its share may have more due runs.
        candidates = [o for o, n in shared if got.get(o, 0) == n and room(o, cap, held_now) != 0]
    return []


def _at_most(n: int, bound: int | None) -> int:
    return n if bound is None else min(n, bound)
