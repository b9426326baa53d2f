"""Issuing, rotating, revoking and checking API tokens: the only code that
writes or reads ``ApiToken`` rows (docs/guides/owners.md "Owners and access").

A key is ``pct_`` and 43 URL-safe characters (32 random bytes); only its
SHA-256 digest and its first 12 characters are stored. Keys made by older
versions (40 hex characters) were converted by a migration and keep working:
the digest is taken of whatever string the client sends.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import secrets

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now

from accounts.models import ApiToken, Retired
from core.db import bound_cursor

KEY_PREFIX = "pct_"
PREFIX_LENGTH = 12
# last_used_at is written at most this often per token: a busy client costs
# one small UPDATE a minute, not one per request.
LAST_USED_EVERY = dt.timedelta(minutes=1)
# The longest life a new token may be given, in days (the API and the admin).
MAX_EXPIRY_DAYS = 3650


class TokenRefused(Exception):
    """The key names no usable token; the message says why, for the client."""


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def expiry_after(days: int | None, *, now: dt.datetime) -> dt.datetime | None:
    """When a token made ``now`` and valid for ``days`` expires; None: never."""
    return None if days is None else now + dt.timedelta(days=days)


def issue(user, *, expires_at: dt.datetime | None = None) -> tuple[ApiToken, str]:
    """A new token for ``user``, retiring the live one as rotated.

    Returns the row and the key, which exists nowhere else afterwards. The
    user's row is locked so two concurrent rotations run one after the other.
    """
    key = new_key()
    with transaction.atomic():
        _lock_user(user)
        _retire_live_token(user, Retired.ROTATED)
        token = ApiToken.objects.create(
            user=user, prefix=key[:PREFIX_LENGTH], digest=digest(key), expires_at=expires_at
        )
    return token, key


def revoke(user) -> bool:
    """Retire the user's live token as revoked; False if there was none."""
    with transaction.atomic():
        _lock_user(user)
        return _retire_live_token(user, Retired.REVOKED)


def live_token(user) -> ApiToken | None:
    return ApiToken.objects.filter(user=user, retired_at__isnull=True).first()


def key_matches(user, key: str) -> bool:
    """Whether ``key`` is the user's live token (``manage.py demo`` keeps its key)."""
    return ApiToken.objects.filter(user=user, retired_at__isnull=True, digest=digest(key)).exists()


def authenticate_key(key: str) -> ApiToken:
    """The live, unexpired token of an active user for ``key``, or TokenRefused.

    One indexed read (by digest, with the database clock for the expiry),
    plus an UPDATE of last_used_at at most once a minute.
    """
    found = _token_by_digest(digest(key))
    if found is None:
        raise TokenRefused("Invalid token.")
    token, db_now = found
    if token.retired_because == Retired.ROTATED:
        raise TokenRefused(
            f"This token was replaced by a newer one at {_iso(token.retired_at)}: use the new key."
        )
    if token.retired_because == Retired.REVOKED:
        raise TokenRefused(f"This token was revoked at {_iso(token.retired_at)}.")
    if token.expires_at is not None and token.expires_at <= db_now:
        raise TokenRefused(f"This token expired at {_iso(token.expires_at)}.")
    if not token.user.is_active:
        raise TokenRefused("User inactive or deleted.")
    _note_use(token, db_now)
    return token


@functools.cache
def _token_by_digest_statement() -> tuple[str, list[str], list[str]]:
    """The one statement behind every API request's authentication: the
    token by its digest, its user, and the database clock (for the expiry);
    with the attribute names of the token's columns and of the user's.
    Written out because the ORM took longer to build it (select_related and
    an annotation, per request) than the database takes to run it."""
    user_model = get_user_model()
    token_fields = ApiToken._meta.concrete_fields
    user_fields = user_model._meta.concrete_fields
    columns = [f"t.{f.column}" for f in token_fields] + [f"u.{f.column}" for f in user_fields]
    sql = (
        f"SELECT {', '.join(columns)}, statement_timestamp()"
        f" FROM {ApiToken._meta.db_table} AS t"
        f" JOIN {user_model._meta.db_table} AS u ON u.id = t.user_id"
        " WHERE t.digest = %s"
    )
    return sql, [f.attname for f in token_fields], [f.attname for f in user_fields]


def _token_by_digest(key_digest: str) -> tuple[ApiToken, dt.datetime] | None:
    """The token whose digest is ``key_digest``, its ``user`` loaded, and
    the database's time; None if there is no such token."""
    sql, token_names, user_names = _token_by_digest_statement()
    with bound_cursor(prepare=True) as cur:
        cur.execute(sql, [key_digest])
        row = cur.fetchone()
    if row is None:
        return None
    split = len(token_names)
    token = ApiToken.from_db(connection.alias, token_names, row[:split])
    token.user = get_user_model().from_db(connection.alias, user_names, row[split:-1])
    return token, row[-1]


def _note_use(token: ApiToken, now: dt.datetime) -> None:
    """Move last_used_at on when it is a minute old. The UPDATE repeats the
    condition, so processes racing on one token write it once."""
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_EVERY:
        return
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=Now() - LAST_USED_EVERY)
    ).update(last_used_at=Now())


def _lock_user(user) -> None:
    list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk"))


def _retire_live_token(user, because: Retired) -> bool:
    """Delete the user's earlier retired tokens, then retire the live one: at
    most two rows per user, and the last retired key still gets its reason."""
    ApiToken.objects.filter(user=user, retired_at__isnull=False).delete()
    retired = ApiToken.objects.filter(user=user, retired_at__isnull=True).update(
        retired_at=Now(), retired_because=because
    )
    return retired > 0


def _iso(value: dt.datetime | None) -> str:
    return value.isoformat().replace("+00:00", "Z") if value else "an unknown time"
