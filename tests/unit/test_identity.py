"""Run ids are uuid5 of the fire: the derivation docs/concepts/run-id.md
"Derived from the fire" publishes, pinned so that a change to it cannot pass
unnoticed (it would give every fire a second identity across an upgrade)."""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
import zoneinfo

import pytest

from runs import identity

JOB = uuid.UUID("3f1c0a52-8f4e-4c3b-9a51-0e2b4c6d7e8f")
FIRE = dt.datetime(2026, 12, 1, 17, 0, tzinfo=dt.UTC)


def test_the_canonical_name_of_a_fire():
    assert identity.fire_name(JOB, FIRE) == (
        "3f1c0a52-8f4e-4c3b-9a51-0e2b4c6d7e8f/2026-12-01T17:00:00.000000Z"
    )
    assert identity.manual_name(JOB, "deploy-42") == (
        "3f1c0a52-8f4e-4c3b-9a51-0e2b4c6d7e8f/manual/deploy-42"
    )


def test_known_ids():
    # The constant is what is under test, so it stays on the left.
    assert identity.NAMESPACE == uuid.UUID("77d8fd04-a94f-4a6a-a552-c696f32bb38b")  # noqa: SIM300
    assert identity.fire_id(JOB, FIRE) == uuid.UUID("6cd2ca3a-5c7d-5604-b74e-8dcc3578ab3b")
    assert identity.fire_id(JOB, FIRE).version == 5
    assert identity.manual_id(JOB, "deploy-42") == uuid.uuid5(
        identity.NAMESPACE, "3f1c0a52-8f4e-4c3b-9a51-0e2b4c6d7e8f/manual/deploy-42"
    )


def test_the_id_is_rfc_uuid5_as_a_receiver_would_compute_it():
    """SHA-1 of the namespace's 16 bytes and the UTF-8 name, first 16 bytes,
    version nibble 5, variant bits 10."""
    digest = bytearray(
        hashlib.sha1(identity.NAMESPACE.bytes + identity.fire_name(JOB, FIRE).encode()).digest()
    )[:16]
    digest[6] = digest[6] & 0x0F | 0x50
    digest[8] = digest[8] & 0x3F | 0x80
    assert identity.fire_id(JOB, FIRE) == uuid.UUID(bytes=bytes(digest))


def test_the_same_instant_in_any_zone_or_spelling_is_the_same_fire():
    paris = FIRE.astimezone(zoneinfo.ZoneInfo("Europe/Paris"))
    assert identity.fire_id(str(JOB).upper(), paris) == identity.fire_id(JOB, FIRE)
    later = FIRE + dt.timedelta(microseconds=1)
    assert identity.fire_name(JOB, later).endswith("T17:00:00.000001Z")
    assert identity.fire_id(JOB, later) != identity.fire_id(JOB, FIRE)


def test_a_naive_time_is_refused_rather_than_guessed():
    with pytest.raises(ValueError, match="timezone-aware"):
        identity.fire_id(JOB, FIRE.replace(tzinfo=None))


def test_the_dispatchers_bulk_hash_equals_uuid5():
    names = [
        identity.fire_name(uuid.uuid4(), FIRE + dt.timedelta(microseconds=n)) for n in range(500)
    ]
    names += [identity.manual_name(JOB, "k\u00e9y")]
    expected = [uuid.uuid5(identity.NAMESPACE, name) for name in names]
    assert [uuid.UUID(hex_) for hex_ in identity.ids_for_names(names)] == expected
