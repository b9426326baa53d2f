"""Webhook secrets: generation, and encryption at rest (docs/security.md "Secrets at rest").

Secrets are stored encrypted with Fernet. The keys come from
``PUNCTUAL_ENCRYPTION_KEYS`` (comma-separated, newest first, so keys can be
rotated with MultiFernet). When that is empty, one key is derived from
``SECRET_KEY`` with HKDF-SHA256, so that a default install is still encrypted.

A missing or wrong key fails closed: ``decrypt`` raises, and the worker then
refuses to deliver rather than send anything unsigned.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import secrets

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


class SecretUnavailable(Exception):
    """The stored secret cannot be decrypted with the configured keys."""


def generate_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _derived_key() -> bytes:
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=b"punctual-secrets-at-rest",
        info=b"fernet-key-v1",
    )
    return base64.urlsafe_b64encode(hkdf.derive(settings.SECRET_KEY.encode()))


def _fernet() -> MultiFernet:
    keys = tuple(k.strip() for k in settings.PUNCTUAL_ENCRYPTION_KEYS if k.strip())
    return _fernet_for(keys, settings.SECRET_KEY)


@functools.lru_cache(maxsize=8)
def _fernet_for(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    # Cached: deriving the key costs more than decrypting, and the worker
    # decrypts a secret for every job it delivers.
    if not keys:
        keys = (_derived_key().decode(),)
    return MultiFernet([Fernet(k) for k in keys])


def prepare() -> None:
    """Build the keys now: a derived key costs a key derivation, which a
    worker pays before its first claim rather than in its first delivery.
    A key that cannot be read is left to ``decrypt`` to refuse (fail closed)."""
    with contextlib.suppress(ValueError):
        _fernet()


def encrypt(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except (InvalidToken, ValueError) as exc:
        raise SecretUnavailable(
            "cannot decrypt the webhook secret with the configured keys"
        ) from exc
