"""How a worker's claim shares its batch among owners, round by round
(docs/design/claims.md): runs/fair_shares.py, pure. The database is a dict here:
each owner's runs that a claim can take now."""

from __future__ import annotations

from collections import Counter

import pytest

from runs.fair_shares import (
    FAIR_ROUNDS,
    next_round,
    one_owner_takes_all,
    owners_with_room,
    shares,
)


def claim_rounds(
    takeable: dict[int, int],
    limit: int,
    *,
    start: int = 0,
    cap: int | None = None,
    held: dict[int, int] | None = None,
) -> list[list[tuple[int, int]]]:
    """The rounds of one fair claim, driven as runs/leases.py drives them.
    ``takeable``: each owner with due runs (in WAITING_OWNERS' order), and
    how many of them a claim can take now (due, unlocked, their turn); each
    round takes up to each share of those."""
    held = held or {}
    left = dict(takeable)
    owners = owners_with_room(list(takeable), cap=cap, held=held)
    taken: list[Counter[int | None]] = []
    rounds = []
    while shared := next_round(owners, limit, start=start, cap=cap, held=held, taken=taken):
        rounds.append(shared)
        got: Counter[int | None] = Counter()
        for owner, share in shared:
            got[owner] = min(share, left[owner])
            left[owner] -= got[owner]
        taken.append(got)
    return rounds


ROUNDS = [
    pytest.param(
        {1: 300, 2: 3},
        10,
        0,
        None,
        {},
        [[(1, 5), (2, 5)], [(1, 2)]],
        id="a-flood-takes-its-share-then-what-the-others-left",
    ),
    pytest.param(
        {1: 300, 2: 3},
        10,
        1,
        None,
        {},
        [[(2, 5), (1, 5)], [(1, 2)]],
        id="the-turn-begins-at-start",
    ),
    pytest.param(
        {1: 50, 2: 50},
        9,
        0,
        None,
        {},
        [[(1, 5), (2, 4)]],
        id="owners-with-more-than-their-share-split-the-batch",
    ),
    pytest.param(
        {1: 100, 2: 100},
        1,
        1,
        None,
        {},
        [[(2, 1)]],
        id="a-batch-of-one-goes-to-the-owner-in-turn",
    ),
    pytest.param(
        {1: 9, 2: 9, 3: 9, 4: 9, 5: 9},
        2,
        3,
        None,
        {},
        [[(4, 1), (5, 1)]],
        id="more-owners-than-runs-the-first-in-turn-get-one-each",
    ),
    pytest.param(
        {1: 100, 2: 3},
        50,
        0,
        10,
        {1: 8},
        [[(1, 2), (2, 10)]],
        id="an-owner-near-the-cap-gets-its-room-and-the-batch-stays-short",
    ),
    pytest.param(
        {1: 100, 2: 100},
        10,
        0,
        10,
        {2: 8},
        [[(1, 5), (2, 2)], [(1, 3)]],
        id="what-the-shares-leave-goes-to-owners-with-room",
    ),
    pytest.param(
        {1: 100},
        50,
        0,
        20,
        {},
        [[(1, 20)]],
        id="one-owner-alone-is-held-to-the-cap",
    ),
    pytest.param(
        {1: 100},
        50,
        0,
        10,
        {1: 10},
        [],
        id="an-owner-at-the-cap-gets-nothing",
    ),
    pytest.param(
        {1: 5, 2: 0, 3: 7, 4: 100},
        20,
        0,
        None,
        {},
        [
            [(1, 5), (2, 5), (3, 5), (4, 5)],
            [(1, 2), (3, 2), (4, 1)],
            [(3, 1), (4, 1)],
        ],
        id="at-most-three-rounds-even-with-the-batch-short",
    ),
]


@pytest.mark.parametrize(("takeable", "limit", "start", "cap", "held", "expected"), ROUNDS)
def test_a_claims_rounds(takeable, limit, start, cap, held, expected):
    assert claim_rounds(takeable, limit, start=start, cap=cap, held=held) == expected


def test_the_round_limit_is_three():
    """The last case above reaches it; a fourth round would give owner 4 the
    run the batch lacks."""
    assert FAIR_ROUNDS == 3


def test_a_round_only_owners_that_filled_their_share_go_on():
    """Replayed from what earlier rounds took: owner 2 got less than its
    share (nothing more of it is takeable), so the next round is owner 1's."""
    first = next_round([1, 2], 10, start=0)
    assert first == [(1, 5), (2, 5)]
    assert next_round([1, 2], 10, start=0, taken=[Counter({1: 5, 2: 3})]) == [(1, 2)]
    # The batch is full: no round.
    assert next_round([1, 2], 10, start=0, taken=[Counter({1: 5, 2: 5})]) == []


def test_shares_are_as_equal_as_whole_runs_allow():
    assert shares([1, 2, 3], 10, 0) == [(1, 4), (2, 3), (3, 3)]
    assert shares([1, 2, 3], 10, 2) == [(3, 4), (1, 3), (2, 3)]
    assert shares([1, 2, 3], 2, 1) == [(2, 1), (3, 1)]


@pytest.mark.parametrize(
    ("waiting", "cap", "held", "expected"),
    [
        ([1, 2, 3], None, {1: 1_000}, [1, 2, 3]),
        ([1, 2, 3], 10, {}, [1, 2, 3]),
        ([1, 2, 3], 10, {2: 10}, [1, 3]),
        ([1, 2, 3], 10, {2: 12, 3: 9}, [1, 3]),
    ],
)
def test_owners_at_the_cap_are_left_out(waiting, cap, held, expected):
    assert owners_with_room(waiting, cap=cap, held=held) == expected


@pytest.mark.parametrize(
    ("waiting", "limit", "cap", "held", "expected"),
    [
        ([1], 10, None, {}, True),
        ([1], 10, 20, {1: 10}, True),
        ([1], 10, 20, {1: 11}, False),
        ([1, 2], 10, None, {}, False),
    ],
)
def test_one_owner_with_room_for_the_batch_takes_it_whole(waiting, limit, cap, held, expected):
    assert one_owner_takes_all(waiting, limit, cap=cap, held=held) is expected
