"""Alert channels as the API reads and writes them (docs/guides/alerts.md)."""

from __future__ import annotations

from rest_framework import serializers

from alerts import saving
from alerts.models import MAX_CHANNEL_NAME, MAX_CHANNEL_URL, Channel
from core.api_fields import StrictCharField, StrictSerializer, UtcDateTimeField


class AlertChannelSerializer(StrictSerializer):
    id = serializers.IntegerField(read_only=True)
    name = StrictCharField(max_length=MAX_CHANNEL_NAME)
    url = StrictCharField(
        max_length=MAX_CHANNEL_URL,
        write_only=True,
        trim_whitespace=False,
        help_text="An apprise URL (json://…, mailto://…, slack://…). Stored encrypted;"
        " answered once, on create or change, never again.",
    )
    masked = serializers.CharField(
        read_only=True, help_text="The scheme and host of the URL: what is shown of it later."
    )
    created_at = UtcDateTimeField(read_only=True)

    def validate_url(self, value: str) -> str:
        # The view looked the URL's hosts up before any transaction.
        reason = saving.refusal(value, self.context["resolve"])
        if reason:
            raise serializers.ValidationError(reason)
        return value

    def validate_name(self, value: str) -> str:
        owner = self.context["owner"]
        clash = Channel.objects.filter(owner=owner, name=value)
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            raise serializers.ValidationError("You already have a channel with this name.")
        return value


class NewAlertChannelSerializer(AlertChannelSerializer):
    """The answer to a create or a URL change: the URL, shown this once."""

    url = serializers.CharField(read_only=True)  # type: ignore[assignment]


class TestAlertSerializer(serializers.Serializer):
    alert_id = serializers.IntegerField(
        help_text="The queued test alert: a worker sends it within seconds."
    )
