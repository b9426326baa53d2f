"""Bodies of the token endpoints (docs/guides/owners.md "Owners and access")."""

from __future__ import annotations

from rest_framework import serializers

from accounts.tokens import MAX_EXPIRY_DAYS, expiry_after
from core.api_fields import AwareDateTimeField, StrictIntegerField, StrictSerializer


class RotateSerializer(StrictSerializer):
    """An optional expiry for the new token: in days, or a time; neither means never.

    ``context["now"]`` is the database clock."""

    expires_in_days = StrictIntegerField(
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        required=False,
        allow_null=True,
        help_text="The new token expires this many days from now.",
    )
    expires_at = AwareDateTimeField(
        required=False, allow_null=True, help_text="The new token expires at this time."
    )

    def validate_expires_at(self, value):
        if value is not None and value <= self.context["now"]:
            raise serializers.ValidationError("Must be in the future.")
        return value

    def validate(self, attrs):
        days, at = attrs.get("expires_in_days"), attrs.get("expires_at")
        if days is not None and at is not None:
            raise serializers.ValidationError(
                {"expires_at": ["Send expires_in_days or expires_at, not both."]}
            )
        if days is not None:
            at = expiry_after(days, now=self.context["now"])
        return {"expires_at": at}


class TokenSerializer(serializers.Serializer):
    """A token as the owner may see it: never the key, which is not stored."""

    prefix = serializers.CharField(help_text="The key's first characters, to recognise it.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(
        allow_null=True, help_text="Updated at most once a minute."
    )


class NewTokenSerializer(TokenSerializer):
    key = serializers.CharField(help_text="The new key. Shown this once: it is not stored.")
