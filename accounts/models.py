"""An owner's API token, stored as a SHA-256 digest of its key, never the key.

The key is 32 random bytes (256 bits), so a fast hash is enough: there is
nothing to guess, and a stolen table gives nobody a usable key. It is shown
once, when it is made (docs/guides/owners.md "Owners and access").

An owner has at most one live token. Rotating or revoking keeps the retired
row (until the next rotation or revocation deletes it), so that a client with
the old key learns *why* it is refused: rotated, revoked, or expired.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class Retired(models.TextChoices):
    ROTATED = "rotated", "replaced by a newer token"
    REVOKED = "revoked", "revoked"


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    # The key's first characters: enough to tell tokens apart, far too few to use.
    prefix = models.CharField(max_length=12)
    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the key, hex.")
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Refused from this time on. Empty: never expires."
    )
    # Written at most once a minute per token (accounts/tokens.py), so reading
    # it is cheap and so is a busy client.
    last_used_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    retired_because = models.CharField(
        max_length=10, choices=Retired.choices, blank=True, default=""
    )

    class Meta:
        verbose_name = "API token"
        constraints = [
            models.UniqueConstraint(
                fields=["user"],
                condition=models.Q(retired_at__isnull=True),
                name="apitoken_one_live_per_user",
            ),
            models.CheckConstraint(
                condition=models.Q(retired_at__isnull=True, retired_because="")
                | models.Q(retired_at__isnull=False, retired_because__in=Retired.values),
                name="apitoken_retired_with_reason",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"
