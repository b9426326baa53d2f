"""A run's id: the fire's identity, derived from the fire, never drawn at random.

Every delivery carries the run id as ``webhook-id`` and ``Idempotency-Key``,
and receivers deduplicate on it. A random id would be the identity of the
*row*: a fire whose row is lost and made again (a backfill over a pruned
window, a restore from a backup, a failover that lost the last transactions)
would come back under a new id and be acted on twice. So the id is a UUID
version 5 (RFC 9562: SHA-1 of a namespace and a name) of what the fire *is*:

* a scheduled, catch-up or backfill fire, and a manual trigger without an
  ``Idempotency-Key``: ``fire_id(job_id, scheduled_at)``, name
  ``"<job id>/<scheduled_at>"``, e.g.
  ``"3f1c0a52-8f4e-4c3b-9a51-0e2b4c6d7e8f/2026-12-01T17:00:00.000000Z"``;
* a manual trigger with an ``Idempotency-Key``: ``manual_id(job_id, key)``,
  name ``"<job id>/manual/<key>"``.

``<job id>`` is the lowercase hyphenated form; ``<scheduled_at>`` is the
instant in UTC, ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (always six fraction digits,
a literal ``Z``), which is exactly what PostgreSQL stores (microseconds), so
the same fire gives the same name whichever path made it. This derivation is
published (docs/concepts/run-id.md "Derived from the fire"): a receiver can
recompute it.

PostgreSQL has no SHA-1 UUID function without extensions, so ids are made
here. The dispatcher's fast path names thousands of fires per second: it lets
PostgreSQL format the names (``FIRE_NAME_SQL``) and hashes them with
``ids_for_names``, which skips ``uuid.uuid5``'s objects and returns the
32-hex-digit text that PostgreSQL's ``uuid`` input accepts.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from hashlib import sha1

NAMESPACE = uuid.UUID("77d8fd04-a94f-4a6a-a552-c696f32bb38b")

_NS = NAMESPACE.bytes
# Version 5 in the high nibble of byte 6, the RFC variant (0b10) in the top
# bits of byte 8, on the 128-bit big-endian integer of the first 16 bytes.
_KEEP = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_SET = (0x5000 << 64) | (0x8000 << 48)

# The same name as fire_name(), made by PostgreSQL from a job row, so the fast
# path reads ready-made names and parses no timestamps in Python. ``{job}``
# and ``{at}`` are the SQL expressions of the job id and the timestamptz.
FIRE_NAME_SQL = (
    "{job}::text || '/' || to_char({at} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
)


def utc_text(at: dt.datetime) -> str:
    """``at`` as the name's timestamp: UTC, microseconds, a literal Z."""
    if at.tzinfo is None:
        raise ValueError("a fire's scheduled_at must be timezone-aware")
    return at.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def fire_name(job_id: uuid.UUID | str, scheduled_at: dt.datetime) -> str:
    return f"{uuid.UUID(str(job_id))}/{utc_text(scheduled_at)}"


def manual_name(job_id: uuid.UUID | str, key: str) -> str:
    return f"{uuid.UUID(str(job_id))}/manual/{key}"


def fire_id(job_id: uuid.UUID | str, scheduled_at: dt.datetime) -> uuid.UUID:
    """The id of the job's fire at ``scheduled_at`` (scheduled, catch-up,
    backfill, or a manual trigger without a key, scheduled at its now)."""
    return uuid.uuid5(NAMESPACE, fire_name(job_id, scheduled_at))


def manual_id(job_id: uuid.UUID | str, key: str) -> uuid.UUID:
    """The id of the job's manual trigger sent with Idempotency-Key ``key``."""
    return uuid.uuid5(NAMESPACE, manual_name(job_id, key))


def ids_for_names(names: Iterable[str]) -> list[str]:
    """uuid5(NAMESPACE, name) for each name, as 32 hex digits (PostgreSQL's
    ``uuid`` input reads them). The same value as ``uuid.uuid5``, about three
    times cheaper: this is on the dispatcher's per-fire path."""
    ns, keep, set_, from_bytes = _NS, _KEEP, _SET, int.from_bytes
    return [
        "%032x" % (from_bytes(sha1(ns + name.encode()).digest()[:16]) & keep | set_)
        for name in names
    ]
